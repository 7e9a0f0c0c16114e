/* fabric.p4 -- L3 fabric switch for scaleout-testbed (v1model, BMv2 simple_switch).
 *
 *   ingress:  parser_error? -> drop (malformed)      ARP request -> proxy reply from router_mac
 *             MAC Control (PFC, PAUSE) -> counted per port (pfc_rx); a PFC frame notes which priorities
 *               the link node behind the port holds (pfc_egress_held) and is relayed to the port's
 *               feeders (pfc_relay: multicast, queue 7) or consumed
 *             ACK/CNP seen  -> learn sender QP        ipv4_lpm -> ECMP group -> hash(5-tuple) -> member
 *             TTL check/decrement, MAC rewrite
 *             CNPs go to the strict-priority queue CNP_PRIORITY (see below)
 *             lossless DSCP (pfc_priority) on a port with pfc_config: account its bytes per
 *               (ingress port, priority); past limit drop (pfc_headroom); at xoff clone it into a PFC
 *               PAUSE out of the ingress port (I2E, session == ingress port), again every refresh_us
 *   egress:   clone? -> build what clone_kind says: fast CNP, or PFC PAUSE / XON (60 bytes)
 *             lossless packet accounted in ingress -> release its bytes; at or below xon after a
 *               PAUSE -> clone an XON out of the ingress port (E2E; wins over this packet's fast CNP),
 *               unless its egress is held (pfc_xon_owed: the relayed XON of that link node resumes it)
 *             RED on enq_qdepth (kmin, kmax, pmax per port from ecn_config)
 *               mode ecn:      set CE on ECT packets
 *               mode fast-cnp: clone the RoCEv2 data packet, turn the clone into a CNP to the SENDER's QP,
 *                              send it back out the ingress port (mirror session id == ingress port)
 *               mode both:     both; mode off: neither
 *             non-ECT packets past kmax are dropped (counted), except lossless ones
 *
 * Why here and not at the receiver: the CNP starts at the congestion point, so the sender hears about
 * congestion after (congestion point -> sender) instead of (congestion point -> receiver -> sender).
 * Why PFC here and not only in the link nodes: on a BMv2 fabric the buffer that fills is BMv2's own
 * egress queue, which no link node sees; a switch pauses its upstream from the occupancy of the bytes
 * that came in by that port (ingress accounting, as switch ASICs do), so the bytes are counted when the
 * ingress pipeline admits a packet and released when the packet leaves the queue into egress.
 * See docs/p4.md for the tables, registers, counters, the ICRC field list and the PFC frame.
 */
#include <core.p4>
#include <v1model.p4>
#include "include/fabric_headers.p4"

const bit<32> DROP_MALFORMED = 0;
const bit<32> DROP_NO_ROUTE = 1;
const bit<32> DROP_TTL = 2;
const bit<32> DROP_QUEUE = 3;
const bit<32> DROP_NOT_IP = 4;
const bit<32> DROP_PFC_HEADROOM = 5;
const bit<32> SKIP_RATE_LIMITED = 0;
const bit<32> SKIP_QP_UNKNOWN = 1;
const bit<32> SKIP_PFC_XON = 2;

const bit<8> MODE_ECN = 1;
const bit<8> MODE_FAST_CNP = 2;

const bit<32> FLOW_SLOTS = 4096;
const bit<32> PKT_INSTANCE_TYPE_INGRESS_CLONE = 1;
const bit<32> PKT_INSTANCE_TYPE_EGRESS_CLONE = 2;
/* What a clone becomes (meta.clone_kind, preserved into the clone). */
const bit<8> CLONE_CNP = 1;
const bit<8> CLONE_PAUSE = 2;
const bit<8> CLONE_XON = 3;
/* Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + pad 16 + ICRC 4 */
const bit<32> CNP_FRAME_BYTES = 74;
/* CNPs travel in priority 6 (the NVIDIA default, DOMAIN.md), strict priority over data and ACKs. Why it
 * matters here more than on hardware: BMv2 drains a queue in packets per second, so a 74-byte CNP behind
 * ACKs waits a full-MTU slot per ACK (1.7 ms at scale 2000, 0.9 us real against 0.06 us on a 10G wire);
 * in the long haul that transit alone put the receiver-side fast CNP 26-40 us over physics. Needs BMv2
 * started with at least CNP_PRIORITY + 1 priority queues (testbed.p4rt.switch.PRIORITY_QUEUES). */
const bit<3> CNP_PRIORITY = 6;
/* PFC frames go to the MAC Control group address and are minimum-size frames (60 bytes without FCS),
 * byte for byte what testbed/pfc/wire.py encodes. */
const bit<48> PFC_DST = 0x0180c2000001;
const bit<32> PFC_FRAME_BYTES = 60;
/* (ingress port, priority) slots of the PFC registers: index = port * 8 + priority. */
const bit<32> PFC_SLOTS = 4096;

/* Sender QP learned from the reverse stream, indexed by hash(sender ip, receiver ip); bit 24 = valid. */
register<bit<32>>(FLOW_SLOTS) sender_qp;
/* Time (us) of the last CNP generated per flow slot, for the rate limit. */
register<bit<48>>(FLOW_SLOTS) cnp_last_us;

/* Queue observed by packets entering the egress pipeline, per egress port (reset by the control plane):
 * peak and sum of enq_qdepth (mean = qdepth_sum / qdepth_pkts), the last packet's (a sample of the queue
 * now, one register read: two counters read apart cannot be divided), and the BMv2 time (us) of the first
 * congestion signal (CE mark or fast CNP) the port caused: the start of a feedback-delay measurement. */
register<bit<32>>(512) qdepth_last;
register<bit<32>>(512) qdepth_peak;
register<bit<64>>(512) qdepth_sum;
register<bit<64>>(512) qdepth_pkts;
register<bit<48>>(512) first_signal_us;

/* Packets sent towards a port by ingress, and packets leaving that port's queue into egress: the
 * difference (once queues drained) is what the traffic manager dropped at a full queue. */
counter(512, CounterType.packets) to_port;
counter(512, CounterType.packets) from_queue;
counter(512, CounterType.packets) marks;
counter(512, CounterType.packets) cnps;
counter(8, CounterType.packets) drops;
counter(4, CounterType.packets) cnp_skipped;

/* PFC ingress accounting per (ingress port, priority): lossless bytes that came in by that port and have
 * not left the egress queue yet, and the BMv2 time (us) of the last PAUSE sent for the slot (0 = not
 * paused: the time is written as max(now, 1)). Both are read-modify-written inside one action each in
 * ingress (admit) and egress (release): BMv2 locks every register an action uses for that action. */
register<bit<32>>(PFC_SLOTS) pfc_bytes;
register<bit<48>>(PFC_SLOTS) pfc_paused_at;
/* Per (egress port, priority): the link node behind the port holds that priority (its PAUSE came in by
 * the port, no XON since). BMv2 cannot stop its queue, so the frames it drains into a paused link node are
 * still in the switch: while a port is held, a slot whose bytes left by it is owed its XON (pfc_xon_owed)
 * and gets it from the link node's own XON, relayed (pfc_relay), not from the accounting here. */
register<bit<1>>(PFC_SLOTS) pfc_egress_held;
/* Per (ingress port, priority): the accounting reached xon while the egress was held; the slot's sender
 * resumes on the relayed XON, and its next frame clears the slot's paused state (pfc_admit). */
register<bit<1>>(PFC_SLOTS) pfc_xon_owed;
/* Per port: MAC Control frames received (and consumed), PFC PAUSEs and XONs sent out of it. */
counter(512, CounterType.packets) pfc_rx;
counter(512, CounterType.packets) pfc_pause_sent;
counter(512, CounterType.packets) pfc_xon_sent;

control FabricIngress(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    bit<48> router_mac = 0;

    action drop(bit<32> reason) {
        drops.count(reason);
        mark_to_drop(standard_metadata);
    }
    action set_router_mac(bit<48> mac) {
        router_mac = mac;
        meta.router_mac = mac;
    }
    table switch_config {
        actions = { set_router_mac; }
        default_action = set_router_mac(48w0x020000000001);
    }

    action set_ecmp_group(bit<16> group, bit<16> count) {
        meta.ecmp_group = group;
        meta.ecmp_count = count;
    }
    action no_route() {
        drop(DROP_NO_ROUTE);
    }
    table ipv4_lpm {
        key = { hdr.ipv4.dst_addr: lpm; }
        actions = { set_ecmp_group; no_route; }
        default_action = no_route();
        size = 4096;
    }

    action set_nhop(bit<9> port, bit<48> smac, bit<48> dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.src = smac;
        hdr.ethernet.dst = dmac;
    }
    table ecmp_nhop {
        key = { meta.ecmp_group: exact; meta.ecmp_index: exact; }
        actions = { set_nhop; no_route; }
        default_action = no_route();
        size = 4096;
    }

    /* Lossless classification: the control plane adds one entry per DSCP whose priority is lossless. */
    action set_lossless(bit<3> prio) {
        meta.pfc_lossless = 1;
        meta.pfc_prio = prio;
    }
    table pfc_priority {
        key = { hdr.ipv4.dscp: exact; }
        actions = { set_lossless; NoAction; }
        default_action = NoAction();
        size = 64;
    }

    /* PFC thresholds of the port a packet came in by, in bytes (limit = xoff + headroom); quanta is the
     * pause time a PAUSE carries; refresh_us how old the last PAUSE of a slot must be before another. */
    action set_pfc(bit<32> xoff, bit<32> xon, bit<32> limit, bit<16> quanta, bit<48> refresh_us) {
        meta.pfc_on = 1;
        meta.pfc_xoff = xoff;
        meta.pfc_xon = xon;
        meta.pfc_limit = limit;
        meta.pfc_quanta_cfg = quanta;
        meta.pfc_refresh_us = refresh_us;
    }
    table pfc_config {
        key = { standard_metadata.ingress_port: exact; }
        actions = { set_pfc; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    /* Admit a lossless packet into its (ingress port, priority) slot, or refuse it past the limit; decide
     * whether a PAUSE goes upstream (crossed xoff, and not paused or the last PAUSE is refresh_us old).
     * One action, so the reads and writes are atomic against egress releasing the same slot. */
    action pfc_admit() {
        bit<32> idx = ((bit<32>) standard_metadata.ingress_port << 3) | (bit<32>) meta.pfc_prio;
        bit<32> len = standard_metadata.packet_length;
        bit<32> held;
        pfc_bytes.read(held, idx);
        bool over = (bit<64>) held + (bit<64>) len > (bit<64>) meta.pfc_limit;
        bit<32> total = held + len;
        pfc_bytes.write(idx, over ? held : total);
        bit<48> now = standard_metadata.ingress_global_timestamp;
        bit<48> at;
        pfc_paused_at.read(at, idx);
        bit<1> owed;
        pfc_xon_owed.read(owed, idx);
        pfc_xon_owed.write(idx, 0);
        at = owed == 1 ? 48w0 : at;           /* the relayed XON resumed the sender: not paused by us now */
        bool pause = !over && total >= meta.pfc_xoff && (at == 0 || now - at >= meta.pfc_refresh_us);
        pfc_paused_at.write(idx, pause ? (now == 0 ? 48w1 : now) : at);
        meta.pfc_idx = idx;
        meta.pfc_len = over ? 32w0 : len;
        meta.pfc_drop = over ? 1w1 : 1w0;
        meta.pfc_pause = pause ? 1w1 : 1w0;
    }

    /* A PFC frame from the link node behind ingress_port: each enabled class is held (pause time > 0) or
     * released (0); the others keep their state (read and written back: no conditions in actions here). */
    action note_held() {
        bit<32> base = (bit<32>) standard_metadata.ingress_port << 3;
        bit<16> v = hdr.pfc.class_enable;
        bit<1> h;
        pfc_egress_held.read(h, base | 0);
        pfc_egress_held.write(base | 0, v[0:0] == 0 ? h : (hdr.pfc.q0 != 0 ? 1w1 : 1w0));
        pfc_egress_held.read(h, base | 1);
        pfc_egress_held.write(base | 1, v[1:1] == 0 ? h : (hdr.pfc.q1 != 0 ? 1w1 : 1w0));
        pfc_egress_held.read(h, base | 2);
        pfc_egress_held.write(base | 2, v[2:2] == 0 ? h : (hdr.pfc.q2 != 0 ? 1w1 : 1w0));
        pfc_egress_held.read(h, base | 3);
        pfc_egress_held.write(base | 3, v[3:3] == 0 ? h : (hdr.pfc.q3 != 0 ? 1w1 : 1w0));
        pfc_egress_held.read(h, base | 4);
        pfc_egress_held.write(base | 4, v[4:4] == 0 ? h : (hdr.pfc.q4 != 0 ? 1w1 : 1w0));
        pfc_egress_held.read(h, base | 5);
        pfc_egress_held.write(base | 5, v[5:5] == 0 ? h : (hdr.pfc.q5 != 0 ? 1w1 : 1w0));
        pfc_egress_held.read(h, base | 6);
        pfc_egress_held.write(base | 6, v[6:6] == 0 ? h : (hdr.pfc.q6 != 0 ? 1w1 : 1w0));
        pfc_egress_held.read(h, base | 7);
        pfc_egress_held.write(base | 7, v[7:7] == 0 ? h : (hdr.pfc.q7 != 0 ? 1w1 : 1w0));
    }

    /* Relay a PFC frame as it came to the ports that feed this one (multicast group from the plan's
     * feeders), in the top priority queue: a MAC sends control frames ahead of data. */
    action relay_pfc(bit<16> group) {
        standard_metadata.mcast_grp = group;
        standard_metadata.priority = 7;
    }
    table pfc_relay {
        key = { standard_metadata.ingress_port: exact; }
        actions = { relay_pfc; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    action arp_reply() {
        hdr.ethernet.dst = hdr.ethernet.src;
        hdr.ethernet.src = router_mac;
        hdr.arp.op = 2;
        bit<32> target = hdr.arp.tpa;
        hdr.arp.tha = hdr.arp.sha;
        hdr.arp.tpa = hdr.arp.spa;
        hdr.arp.sha = router_mac;
        hdr.arp.spa = target;
        standard_metadata.egress_spec = standard_metadata.ingress_port;
    }

    apply {
        if (standard_metadata.parser_error != error.NoError || standard_metadata.checksum_error == 1) {
            drop(DROP_MALFORMED);
            return;
        }
        if (hdr.pfc.isValid()) {
            /* A MAC Control frame is for this switch's MAC. The switch does not pause its own queues on it
             * (BMv2 has no per-priority transmit gate): in the testbed the link node behind the port
             * honours PAUSE (testbed/pfc) and sends its own at its xoff. Here: count it, note which
             * priorities the port's link node holds, and relay it to the ports that feed that port
             * (pfc_relay, from the plan; no entry: consumed). */
            pfc_rx.count((bit<32>) standard_metadata.ingress_port);
            if (hdr.pfc.opcode == MAC_CONTROL_OPCODE_PFC) {
                note_held();
            }
            if (!pfc_relay.apply().hit) {
                mark_to_drop(standard_metadata);
            }
            return;
        }
        switch_config.apply();
        if (hdr.arp.isValid()) {
            if (hdr.arp.op == 1 && hdr.arp.ptype == ETHERTYPE_IPV4 && hdr.arp.spa != hdr.arp.tpa) {
                arp_reply();
            } else {
                drop(DROP_NOT_IP);
            }
            return;
        }
        if (!hdr.ipv4.isValid()) {
            drop(DROP_NOT_IP);
            return;
        }
        if (hdr.bth.isValid()) {
            /* ACKs (0x11, 0x12), read responses (0x0d-0x10) and CNPs travel receiver -> sender and carry
             * DestQP = the sender's QP: remember it under (sender ip, receiver ip). */
            bit<8> op = hdr.bth.opcode;
            if ((op >= 0x0d && op <= 0x12) || op == BTH_OPCODE_CNP) {
                bit<32> slot;
                hash(slot, HashAlgorithm.crc32, 32w0, { hdr.ipv4.dst_addr, hdr.ipv4.src_addr }, FLOW_SLOTS);
                sender_qp.write(slot, 32w0x1000000 | (bit<32>) hdr.bth.dest_qp);
            }
            if (op == BTH_OPCODE_CNP) {
                standard_metadata.priority = CNP_PRIORITY;
            }
        }
        if (hdr.ipv4.ttl <= 1) {
            drop(DROP_TTL);
            return;
        }
        meta.orig_smac = hdr.ethernet.src;
        if (ipv4_lpm.apply().hit) {
            hash(meta.ecmp_index, HashAlgorithm.crc16, 16w0,
                 { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.protocol, meta.l4_src, meta.l4_dst },
                 meta.ecmp_count);
            if (ecmp_nhop.apply().hit) {
                hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
                pfc_priority.apply();
                if (meta.pfc_lossless == 1) {
                    pfc_config.apply();
                }
                if (meta.pfc_on == 1) {
                    pfc_admit();
                    if (meta.pfc_drop == 1) {
                        /* Before to_port: a packet refused here never reaches the queue, and the tail
                         * (to_port - from_queue) must not count it a second time. */
                        drop(DROP_PFC_HEADROOM);
                        return;
                    }
                    if (meta.pfc_pause == 1) {
                        pfc_pause_sent.count((bit<32>) standard_metadata.ingress_port);
                        meta.clone_kind = CLONE_PAUSE;
                        meta.pfc_quanta = meta.pfc_quanta_cfg;
                        clone_preserving_field_list(CloneType.I2E, (bit<32>) standard_metadata.ingress_port, 1);
                    }
                }
                to_port.count((bit<32>) standard_metadata.egress_spec);
            }
        }
    }
}

control FabricEgress(inout headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {
    action set_ecn(bit<32> kmin, bit<32> kmax, bit<32> pmax_q16, bit<8> mode, bit<48> cnp_interval_us) {
        meta.kmin = kmin;
        meta.kmax = kmax;
        meta.pmax_q16 = pmax_q16;
        meta.mode = mode;
        meta.cnp_interval_us = cnp_interval_us;
    }
    /* Per egress port; the default action (set by the control plane) covers every other port. */
    table ecn_config {
        key = { standard_metadata.egress_port: exact; }
        actions = { set_ecn; }
        default_action = set_ecn(0, 0, 0, 0, 0);
        size = 512;
    }

    action set_sender_qp(bit<24> qp) {
        meta.cnp_qp = qp;
    }
    /* Sender QPs configured by the control plane: (sender ip, receiver ip, receiver QP) -> sender QP. */
    table qp_map {
        key = { hdr.ipv4.src_addr: exact; hdr.ipv4.dst_addr: exact; hdr.bth.dest_qp: exact; }
        actions = { set_sender_qp; NoAction; }
        default_action = NoAction();
        size = 4096;
    }

    /* Remember when this port first sent a congestion signal (CE mark or CNP) since the last reset. */
    action note_signal(bit<32> port) {
        bit<48> first;
        first_signal_us.read(first, port);
        first_signal_us.write(port, first == 0 ? standard_metadata.egress_global_timestamp : first);
    }

    /* Release what ingress accounted for this packet, now that it has left the queue; XON when the slot
     * was paused and is now at or below xon. One action: atomic against ingress admitting into the slot. */
    action pfc_release() {
        bit<32> held;
        pfc_bytes.read(held, meta.pfc_idx);
        bit<32> left = held > meta.pfc_len ? held - meta.pfc_len : 32w0;
        pfc_bytes.write(meta.pfc_idx, left);
        bit<48> at;
        pfc_paused_at.read(at, meta.pfc_idx);
        bit<1> held_out;
        pfc_egress_held.read(held_out, ((bit<32>) standard_metadata.egress_port << 3) | (bit<32>) meta.pfc_prio);
        bool due = at != 0 && left <= meta.pfc_xon;
        bool resume = due && held_out == 0;
        pfc_paused_at.write(meta.pfc_idx, resume ? 48w0 : at);
        bit<1> owed;
        pfc_xon_owed.read(owed, meta.pfc_idx);
        pfc_xon_owed.write(meta.pfc_idx, due && held_out == 1 ? 1w1 : owed);
        meta.pfc_resume = resume ? 1w1 : 1w0;
    }

    /* The clone becomes a PFC frame for priority pfc_prio: PAUSE (pause time pfc_quanta) or XON (0). The
     * other headers are invalidated and the 60 bytes emitted are Ethernet + pfc + pad; truncate drops
     * the rest of the cloned packet. */
    action build_pfc(bit<16> quanta) {
        hdr.ethernet.dst = PFC_DST;
        hdr.ethernet.src = meta.router_mac;
        hdr.ethernet.ether_type = ETHERTYPE_MAC_CONTROL;
        hdr.arp.setInvalid();
        hdr.ipv4.setInvalid();
        hdr.udp.setInvalid();
        hdr.tcp.setInvalid();
        hdr.bth.setInvalid();
        hdr.cnp_pad.setInvalid();
        hdr.icrc.setInvalid();
        hdr.pfc.setValid();
        hdr.pfc.opcode = MAC_CONTROL_OPCODE_PFC;
        hdr.pfc.class_enable = 16w1 << meta.pfc_prio;
        hdr.pfc.q0 = meta.pfc_prio == 0 ? quanta : 16w0;
        hdr.pfc.q1 = meta.pfc_prio == 1 ? quanta : 16w0;
        hdr.pfc.q2 = meta.pfc_prio == 2 ? quanta : 16w0;
        hdr.pfc.q3 = meta.pfc_prio == 3 ? quanta : 16w0;
        hdr.pfc.q4 = meta.pfc_prio == 4 ? quanta : 16w0;
        hdr.pfc.q5 = meta.pfc_prio == 5 ? quanta : 16w0;
        hdr.pfc.q6 = meta.pfc_prio == 6 ? quanta : 16w0;
        hdr.pfc.q7 = meta.pfc_prio == 7 ? quanta : 16w0;
        hdr.pfc_pad.setValid();
        hdr.pfc_pad.zero = 0;
        truncate(PFC_FRAME_BYTES);
    }

    action build_cnp() {
        hdr.ethernet.dst = meta.orig_smac;
        bit<32> sender = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
        hdr.ipv4.dst_addr = sender;
        hdr.ipv4.ecn = 0;
        hdr.ipv4.total_len = 60;
        hdr.ipv4.identification = 0;
        hdr.ipv4.flags = 2;
        hdr.ipv4.frag_offset = 0;
        hdr.ipv4.ttl = 64;
        hdr.udp.dst_port = ROCEV2_UDP_PORT;
        hdr.udp.length = 40;
        hdr.udp.checksum = 0;
        hdr.bth.opcode = BTH_OPCODE_CNP;
        hdr.bth.se = 0;
        hdr.bth.migreq = 0;
        hdr.bth.pad_count = 0;
        hdr.bth.tver = 0;
        hdr.bth.pkey = 0xffff;
        hdr.bth.fecn = 0;
        hdr.bth.becn = 1;
        hdr.bth.resv6 = 0;
        hdr.bth.dest_qp = meta.cnp_qp;
        hdr.bth.ack_req = 0;
        hdr.bth.resv7 = 0;
        hdr.bth.psn = 0;
        hdr.cnp_pad.setValid();
        hdr.cnp_pad.zero = 0;
        hdr.icrc.setValid();
        truncate(CNP_FRAME_BYTES);
    }

    /* ICRC over the CNP (IBA vol. 1 annex A17.3.3): 8 bytes of ones, then IPv4 with DSCP/ECN, TTL and
     * checksum as ones, UDP with checksum as ones, BTH with its FECN/BECN/resv6 byte as ones, then the
     * 16 pad bytes. BMv2's crc32 equals zlib.crc32; the ICRC goes on the wire little-endian. */
    action compute_icrc() {
        bit<32> crc;
        hash(crc, HashAlgorithm.crc32, 32w0,
             { 64w0xffffffffffffffff,
               hdr.ipv4.version, hdr.ipv4.ihl, 8w0xff, hdr.ipv4.total_len, hdr.ipv4.identification,
               hdr.ipv4.flags, hdr.ipv4.frag_offset, 8w0xff, hdr.ipv4.protocol, 16w0xffff,
               hdr.ipv4.src_addr, hdr.ipv4.dst_addr,
               hdr.udp.src_port, hdr.udp.dst_port, hdr.udp.length, 16w0xffff,
               hdr.bth.opcode, hdr.bth.se, hdr.bth.migreq, hdr.bth.pad_count, hdr.bth.tver, hdr.bth.pkey,
               8w0xff, hdr.bth.dest_qp, hdr.bth.ack_req, hdr.bth.resv7, hdr.bth.psn,
               hdr.cnp_pad.zero },
             64w0x100000000);
        hdr.icrc.crc = crc[7:0] ++ crc[15:8] ++ crc[23:16] ++ crc[31:24];
    }

    apply {
        if (standard_metadata.instance_type == PKT_INSTANCE_TYPE_EGRESS_CLONE ||
            standard_metadata.instance_type == PKT_INSTANCE_TYPE_INGRESS_CLONE) {
            /* By kind, not instance type: a PAUSE is an ingress clone, an XON and a fast CNP are both
             * egress clones. A clone of no known kind is not sent (none is made today). */
            if (meta.clone_kind == CLONE_CNP) {
                build_cnp();
                compute_icrc();
            } else if (meta.clone_kind == CLONE_PAUSE) {
                build_pfc(meta.pfc_quanta);
            } else if (meta.clone_kind == CLONE_XON) {
                build_pfc(16w0);
            } else {
                mark_to_drop(standard_metadata);
            }
            return;
        }
        /* Released before anything else returns: a lossless packet left the queue whatever egress does
         * with it next (RED never drops it). BMv2 keeps only a pass's last clone call, so an XON here
         * suppresses this packet's fast CNP below: a lost XON leaves the sender paused for a whole pause
         * time, a lost fast CNP is one of a rate-limited stream. */
        bool xon = false;
        if (meta.pfc_len != 0) {
            pfc_release();
            if (meta.pfc_resume == 1) {
                xon = true;
                pfc_xon_sent.count((bit<32>) standard_metadata.ingress_port);
                meta.clone_kind = CLONE_XON;
                clone_preserving_field_list(CloneType.E2E, (bit<32>) standard_metadata.ingress_port, 1);
            }
        }
        if (!hdr.ipv4.isValid()) {
            return;
        }
        bit<32> port = (bit<32>) standard_metadata.egress_port;
        bit<32> q = (bit<32>) standard_metadata.enq_qdepth;
        from_queue.count(port);
        qdepth_last.write(port, q);
        bit<32> peak;
        qdepth_peak.read(peak, port);
        if (q > peak) {
            qdepth_peak.write(port, q);
        }
        bit<64> acc;
        qdepth_sum.read(acc, port);
        qdepth_sum.write(port, acc + (bit<64>) q);
        qdepth_pkts.read(acc, port);
        qdepth_pkts.write(port, acc + 1);
        ecn_config.apply();
        if (meta.mode == 0) {
            return;
        }
        /* RED: 0 at or below kmin, pmax * (q - kmin) / (kmax - kmin) between, 1 at kmax and above.
         * Without division: mark when r * (kmax - kmin) < pmax_q16 * (q - kmin), r uniform in [0, 2^16). */
        bool congested = false;
        if (q >= meta.kmax) {
            congested = true;
        } else if (q > meta.kmin) {
            bit<16> r;
            random(r, 0, 0xffff);
            bit<64> lhs = ((bit<64>) r) * ((bit<64>) (meta.kmax - meta.kmin));
            bit<64> rhs = ((bit<64>) meta.pmax_q16) * ((bit<64>) (q - meta.kmin));
            congested = lhs < rhs;
        }
        if (!congested) {
            return;
        }
        if (hdr.ipv4.ecn == 0) {
            /* A lossless priority is never dropped by AQM: PFC holds its senders back instead. */
            if (q >= meta.kmax && meta.pfc_lossless == 0) {
                drops.count(DROP_QUEUE);
                mark_to_drop(standard_metadata);
            }
            return;
        }
        if ((meta.mode & MODE_ECN) != 0 && hdr.ipv4.ecn != 3) {
            hdr.ipv4.ecn = 3;
            marks.count(port);
            note_signal(port);
        }
        if ((meta.mode & MODE_FAST_CNP) == 0 || !hdr.bth.isValid()) {
            return;
        }
        bit<8> op = hdr.bth.opcode;
        bool data = op <= 0x0b || (op >= 0x20 && op <= 0x2b) || op == 0x64 || op == 0x65;
        if (!data) {
            return;
        }
        bit<32> slot;
        hash(slot, HashAlgorithm.crc32, 32w0, { hdr.ipv4.src_addr, hdr.ipv4.dst_addr }, FLOW_SLOTS);
        bool known = qp_map.apply().hit;
        if (!known) {
            bit<32> learned;
            sender_qp.read(learned, slot);
            known = learned[24:24] == 1;
            meta.cnp_qp = learned[23:0];
        }
        if (!known) {
            cnp_skipped.count(SKIP_QP_UNKNOWN);
            return;
        }
        if (xon) {
            cnp_skipped.count(SKIP_PFC_XON);
            return;
        }
        bit<48> now = standard_metadata.egress_global_timestamp;
        bit<48> last;
        cnp_last_us.read(last, slot);
        if (last != 0 && now - last < meta.cnp_interval_us) {
            cnp_skipped.count(SKIP_RATE_LIMITED);
            return;
        }
        cnp_last_us.write(slot, now);
        cnps.count(port);
        note_signal(port);
        meta.clone_kind = CLONE_CNP;
        clone_preserving_field_list(CloneType.E2E, (bit<32>) standard_metadata.ingress_port, 1);
    }
}

V1Switch(FabricParser(), FabricVerifyChecksum(), FabricIngress(), FabricEgress(),
         FabricComputeChecksum(), FabricDeparser()) main;
