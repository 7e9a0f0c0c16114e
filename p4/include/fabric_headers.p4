/* Headers, metadata and parser of fabric.p4 (v1model).
 *
 *   ethernet --0x0800--> ipv4 --17--> udp --4791--> bth            (RoCEv2)
 *            \-0x0806--> arp   \--6--> tcp
 *
 * Only IPv4 without options is forwarded: anything the parser cannot take (truncated headers, IPv4
 * version != 4 or IHL != 5, a BTH shorter than 12 bytes) reaches ingress with parser_error set and is
 * dropped and counted there (drops[DROP_MALFORMED]).
 */
#ifndef FABRIC_HEADERS_P4
#define FABRIC_HEADERS_P4

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_ARP = 0x0806;
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

struct headers_t {
    ethernet_t ethernet;
    arp_t arp;
    ipv4_t ipv4;
    udp_t udp;
    tcp_t tcp;
    bth_t bth;
    cnp_pad_t cnp_pad;
    icrc_t icrc;
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
    /* Preserved into the CNP clone. */
    @field_list(1)
    bit<48> orig_smac;
    @field_list(1)
    bit<24> cnp_qp;
}

parser FabricParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_ARP: parse_arp;
            default: accept;
        }
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
