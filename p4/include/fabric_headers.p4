/* Headers, metadata and parser of fabric.p4 (v1model).
 *
 *   ethernet --0x0800--> ipv4 --17--> udp --4791--> bth            (RoCEv2)
 *            \-0x0806--> arp   \--6--> tcp
 *            \-0x8808--> pfc                                       (MAC Control: PFC, 802.3x PAUSE)
 *
 * Only IPv4 without options is forwarded: anything the parser cannot take (truncated headers, IPv4
 * version != 4 or IHL != 5, a BTH shorter than 12 bytes) reaches ingress with parser_error set and is
 * dropped and counted there (drops[DROP_MALFORMED]).
 */
#ifndef FABRIC_HEADERS_P4
#define FABRIC_HEADERS_P4

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_ARP = 0x0806;
const bit<16> ETHERTYPE_MAC_CONTROL = 0x8808;
const bit<16> MAC_CONTROL_OPCODE_PFC = 0x0101;
const bit<8> PROTO_TCP = 6;
const bit<8> PROTO_UDP = 17;
const bit<16> ROCEV2_UDP_PORT = 4791;
const bit<8> BTH_OPCODE_CNP = 0x81;

error { IPv4BadHeader }

header ethernet_t {
    bit<48> dst;
    bit<48> src;
    bit<16> ether_type;
}

header arp_t {
    bit<16> htype;
    bit<16> ptype;
    bit<8> hlen;
    bit<8> plen;
    bit<16> op;
    bit<48> sha;
    bit<32> spa;
    bit<48> tha;
    bit<32> tpa;
}

header ipv4_t {
    bit<4> version;
    bit<4> ihl;
    bit<6> dscp;
    bit<2> ecn;
    bit<16> total_len;
    bit<16> identification;
    bit<3> flags;
    bit<13> frag_offset;
    bit<8> ttl;
    bit<8> protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

header tcp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<32> seq;
    bit<32> ack;
    bit<4> data_offset;
    bit<4> res;
    bit<8> flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgent;
}

/* InfiniBand Base Transport Header (IBA vol. 1, 9.2), 12 bytes. */
header bth_t {
    bit<8> opcode;
    bit<1> se;
    bit<1> migreq;
    bit<2> pad_count;
    bit<4> tver;
    bit<16> pkey;
    bit<1> fecn;
    bit<1> becn;
    bit<6> resv6;
    bit<24> dest_qp;
    bit<1> ack_req;
    bit<7> resv7;
    bit<24> psn;
}

/* The 16 reserved zero bytes a CNP carries after its BTH. */
header cnp_pad_t {
    bit<128> zero;
}

/* Invariant CRC, sent little-endian (the P4 field holds the byte-swapped CRC-32). */
header icrc_t {
    bit<32> crc;
}

/* MAC Control frame body (IEEE 802.1Qbb, 36.1.3): opcode, class-enable vector (bit p = priority p) and
 * one pause time per priority in quanta of 512 bit times (0 = XON). An 802.3x PAUSE (opcode 0x0001)
 * parses into the same 20 bytes (its single pause time lands in class_enable; it is only counted). */
header pfc_t {
    bit<16> opcode;
    bit<16> class_enable;
    bit<16> q0;
    bit<16> q1;
    bit<16> q2;
    bit<16> q3;
    bit<16> q4;
    bit<16> q5;
    bit<16> q6;
    bit<16> q7;
}

/* Zero pad of a switch-made PFC frame up to the 60-byte minimum (14 + 20 + 26, FCS not counted). */
header pfc_pad_t {
    bit<208> zero;
}

struct headers_t {
    ethernet_t ethernet;
    arp_t arp;
    ipv4_t ipv4;
    udp_t udp;
    tcp_t tcp;
    bth_t bth;
    cnp_pad_t cnp_pad;
    icrc_t icrc;
    pfc_t pfc;
    pfc_pad_t pfc_pad;
}

struct metadata_t {
    bit<16> l4_src;
    bit<16> l4_dst;
    bit<16> ecmp_group;
    bit<16> ecmp_count;
    bit<16> ecmp_index;
    /* RED / fast-CNP configuration of the egress port (table ecn_config). */
    bit<32> kmin;
    bit<32> kmax;
    bit<32> pmax_q16;
    bit<8> mode;
    bit<48> cnp_interval_us;
    /* PFC of a lossless packet (tables pfc_priority, pfc_config): set by ingress, read by the same
     * packet's egress, which releases exactly what ingress accounted (pfc_len at pfc_idx; 0 = none). */
    bit<1> pfc_lossless;
    bit<1> pfc_on;
    bit<32> pfc_xoff;
    bit<32> pfc_xon;
    bit<32> pfc_limit;
    bit<16> pfc_quanta_cfg;
    bit<48> pfc_refresh_us;
    bit<32> pfc_idx;
    bit<32> pfc_len;
    bit<1> pfc_drop;
    bit<1> pfc_pause;
    bit<1> pfc_resume;
    /* Preserved into clones (one field list for every kind; clone_kind says which frame to build, since
     * a PAUSE is an ingress clone but an XON and a fast CNP are both egress clones). BMv2 copies these
     * at the end of the pipeline, so whatever the last clone call of a pass set is what the clone gets. */
    @field_list(1)
    bit<48> orig_smac;
    @field_list(1)
    bit<24> cnp_qp;
    @field_list(1)
    bit<8> clone_kind;
    @field_list(1)
    bit<3> pfc_prio;
    @field_list(1)
    bit<16> pfc_quanta;
    @field_list(1)
    bit<48> router_mac;
}

parser FabricParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_ARP: parse_arp;
            ETHERTYPE_MAC_CONTROL: parse_mac_control;
            default: accept;
        }
    }
    state parse_mac_control {
        packet.extract(hdr.pfc);
        transition accept;
    }
    state parse_arp {
        packet.extract(hdr.arp);
        transition accept;
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.version == 4 && hdr.ipv4.ihl == 5, error.IPv4BadHeader);
        transition select(hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (0, PROTO_UDP): parse_udp;
            (0, PROTO_TCP): parse_tcp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src = hdr.udp.src_port;
        meta.l4_dst = hdr.udp.dst_port;
        transition select(hdr.udp.dst_port) {
            ROCEV2_UDP_PORT: parse_bth;
            default: accept;
        }
    }
    state parse_tcp {
        packet.extract(hdr.tcp);
        meta.l4_src = hdr.tcp.src_port;
        meta.l4_dst = hdr.tcp.dst_port;
        transition accept;
    }
    state parse_bth {
        packet.extract(hdr.bth);
        transition accept;
    }
}

control FabricDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.pfc);
        packet.emit(hdr.pfc_pad);
        packet.emit(hdr.arp);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.tcp);
        packet.emit(hdr.bth);
        packet.emit(hdr.cnp_pad);
        packet.emit(hdr.icrc);
    }
}

control FabricVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control FabricComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

#endif
