/* aggregation.p4 -- in-network aggregation for BMv2 (v1model): SwitchML's slot pool, ATP's PS fallback.
 *
 *   worker w --UDP :48864+1+job -> :48864 [agg hdr | AGG_ELEMS x int32]--> switch (dst = aggregator IP)
 *                                                          |
 *      job_table[job] -> base, size, limit, members, mcast group, parameter server
 *         unknown job / bad count / bad worker / index >= limit   -> drop, count (never touches slots)
 *         size <= index < limit  (switch slots exhausted)          -> forward to the PS (ATP fallback)
 *         index < size: slot = 2 * (base + index) + shadow bit     -> aggregate
 *
 *   per physical slot: value registers v0..v(N-1), bitmap, count, exponent (max of the workers' next one)
 *     new bit     : set it here, clear it in the other copy (slot ^ 1); first bit overwrites, others add
 *                   on count == members: multicast the result to the job's group (RESULT flag, from
 *                   the aggregator's IP and UDP 48864 to the job's port; egress port_host readdresses
 *                   each replica to the host on its port)
 *     bit already set, slot complete   : unicast the stored result back (shadow copy serves retransmits)
 *     bit already set, slot incomplete : drop (duplicate)
 *
 * The two copies of a slot alternate (the shadow bit of pool_index): chunk c uses copy (c / W) % 2 of
 * slot c % W, so the result of chunk c stays readable until every worker has moved on to chunk c + W,
 * whose contribution clears its bit in c's copy (SwitchML, NSDI'21). A worker only sends
 * chunk c + 2W after c + W completed, so when c + 2W arrives every bit of its copy has been cleared and
 * the first contribution overwrites the stale values.
 *
 * Elements per packet: AGG_ELEMS (default 256, i.e. 1 KB of payload as SwitchML's 1 KB mode). BMv2's
 * fixed per-packet cost dominates, so more elements per packet aggregate more bytes per second
 * (`testbed bench agg --elems` measures 32/64/128/256) and header overhead falls (54 B on 1078 B). It must be
 * 32, 64, 128 or 256; compile with -DAGG_ELEMS=64 to change it. The Python model (testbed.agg.model)
 * implements the same rules and the integration tests check that both agree.
 *
 * Non-aggregation traffic (ring baseline, PS traffic, results addressed to a worker) is routed by
 * ipv4_route (LPM on the destination).
 */
#include <core.p4>
#include <v1model.p4>

#ifndef AGG_ELEMS
#define AGG_ELEMS 256
#endif
#ifndef POOL_SLOTS
#define POOL_SLOTS 1024          /* logical slots; each has two physical copies */
#endif
#define AGG_PORT 48864           /* 0xBEE0, SwitchML's port */

/* flags */
#define FLAG_RESULT 0x01         /* packet carries a complete sum */
#define FLAG_SPILL  0x02         /* forwarded to the parameter server (switch slots exhausted) */

/* stats counter indices (keep in sync with testbed/agg/protocol.py: Stat) */
#define ST_CONTRIB     0
#define ST_COMPLETE    1
#define ST_DUPLICATE   2
#define ST_SHADOW      3
#define ST_SPILL       4
#define ST_BAD_JOB     5
#define ST_BAD_INDEX   6
#define ST_BAD_COUNT   7
#define ST_BAD_WORKER  8
#define ST_BAD_FLAGS   9   /* a result sent to the aggregator */
#define N_STATS        16

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }

header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> total_len; bit<16> identification;
    bit<3> flags; bit<13> frag_offset; bit<8> ttl; bit<8> protocol; bit<16> hdr_checksum;
    bit<32> src; bit<32> dst;
}

header udp_t { bit<16> sport; bit<16> dport; bit<16> length; bit<16> checksum; }

/* 12 bytes, network order; see testbed/agg/protocol.py for the Python side. */
header agg_t {
    bit<8>  job;         /* job id, key of job_table */
    bit<8>  worker;      /* worker id 0..31 -> bitmap bit */
    bit<8>  flags;       /* FLAG_* */
    bit<8>  exponent;    /* biased by 128; request: worker's exponent for its next chunk in this slot;
                            result: max over the workers */
    bit<16> pool_index;  /* bit 15: shadow copy; bits 14..0: job-relative slot */
    bit<16> count;       /* elements in the packet, must equal AGG_ELEMS */
    bit<32> seq;         /* chunk number, echoed in results (worker bookkeeping) */
}

#define F8(p) bit<32> p##0; bit<32> p##1; bit<32> p##2; bit<32> p##3; \
              bit<32> p##4; bit<32> p##5; bit<32> p##6; bit<32> p##7;
header data32_t { F8(a) F8(b) F8(c) F8(d) }

struct headers_t {
    ethernet_t eth; ipv4_t ipv4; udp_t udp; agg_t agg;
    data32_t d0;
#if AGG_ELEMS > 32
    data32_t d1;
#endif
#if AGG_ELEMS > 64
    data32_t d2; data32_t d3;
#endif
#if AGG_ELEMS > 128
    data32_t d4; data32_t d5; data32_t d6; data32_t d7;
#endif
}

struct meta_t {
    bit<32> slot;        /* physical register index */
    bit<32> keep;        /* all ones: add to the stored value; zero: first contribution overwrites */
    bit<32> addm;        /* all ones: new contribution; zero: duplicate, read only */
    bit<32> wbit;        /* 1 << worker */
    bit<32> bitmap;      /* bitmap after this packet */
    bit<32> members;     /* bitmap of the job's workers */
    bit<8>  nworkers;
    bit<8>  count;       /* contributions after this packet */
    bit<16> size;        /* switch slots of the job */
    bit<16> limit;       /* largest valid index + 1 (beyond size: PS) */
    bit<16> base;
    bit<16> mgrp;
    bit<32> ps_ip;
    bit<1>  rewrite;     /* egress: address the replica to the host on its port */
    bit<1>  route;       /* leave by ipv4_route */
}

parser AggParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition select(hdr.eth.ether_type) { 0x0800: ipv4; default: accept; } }
    state ipv4 { pkt.extract(hdr.ipv4); transition select(hdr.ipv4.protocol) { 17: udp; default: accept; } }
    /* requests go to AGG_PORT; results come from it (to the job's port, AGG_PORT + job) */
    state udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.sport, hdr.udp.dport) { (AGG_PORT, _): agg; (_, AGG_PORT): agg; default: accept; }
    }
    state agg {
        pkt.extract(hdr.agg);
        /* a short packet (wrong element count) fails extraction: BMv2 drops it in the parser. The
           count field check below catches a packet that is long enough but claims another count. */
        pkt.extract(hdr.d0);
#if AGG_ELEMS > 32
        pkt.extract(hdr.d1);
#endif
#if AGG_ELEMS > 64
        pkt.extract(hdr.d2); pkt.extract(hdr.d3);
#endif
#if AGG_ELEMS > 128
        pkt.extract(hdr.d4); pkt.extract(hdr.d5); pkt.extract(hdr.d6); pkt.extract(hdr.d7);
#endif
        transition accept;
    }
}

control AggVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

#define PHYS (2 * POOL_SLOTS)
#define R8(p) register<bit<32>>(PHYS) p##0; register<bit<32>>(PHYS) p##1; register<bit<32>>(PHYS) p##2; \
              register<bit<32>>(PHYS) p##3; register<bit<32>>(PHYS) p##4; register<bit<32>>(PHYS) p##5; \
              register<bit<32>>(PHYS) p##6; register<bit<32>>(PHYS) p##7;
#define R32(p) R8(p##a) R8(p##b) R8(p##c) R8(p##d)

/* one element: read, (keep & stored) + (addm & new), write back, copy into the packet */
#define E(r, f) r.read(t, meta.slot); t = (t & meta.keep) + (f & meta.addm); r.write(meta.slot, t); f = t;
#define E8(r, h, p) E(r##p##0, h.p##0) E(r##p##1, h.p##1) E(r##p##2, h.p##2) E(r##p##3, h.p##3) \
                    E(r##p##4, h.p##4) E(r##p##5, h.p##5) E(r##p##6, h.p##6) E(r##p##7, h.p##7)
#define E32(r, h) E8(r, h, a) E8(r, h, b) E8(r, h, c) E8(r, h, d)

/* The slot pool: everything an aggregation packet addressed to this switch does. Sets meta.route when
   the packet leaves by ordinary routing (PS fallback, shadow-copy reply). */
control AggSlots(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    R32(v0_)
#if AGG_ELEMS > 32
    R32(v1_)
#endif
#if AGG_ELEMS > 64
    R32(v2_) R32(v3_)
#endif
#if AGG_ELEMS > 128
    R32(v4_) R32(v5_) R32(v6_) R32(v7_)
#endif
    register<bit<32>>(PHYS) bitmap;
    register<bit<8>>(PHYS) contributions;
    register<bit<8>>(PHYS) exponent;
    counter(N_STATS, CounterType.packets) stats;

    action drop() { mark_to_drop(sm); }

    action set_job(bit<16> base, bit<16> size, bit<16> limit, bit<32> members, bit<8> nworkers,
                   bit<16> mgrp, bit<32> ps_ip) {
        meta.base = base; meta.size = size; meta.limit = limit; meta.members = members;
        meta.nworkers = nworkers; meta.mgrp = mgrp; meta.ps_ip = ps_ip;
    }
    table job_table {
        key = { hdr.agg.job: exact; }
        actions = { set_job; NoAction; }
        default_action = NoAction();
        size = 64;
    }

    action aggregate() {
        bit<32> t;
        E32(v0_, hdr.d0)
#if AGG_ELEMS > 32
        E32(v1_, hdr.d1)
#endif
#if AGG_ELEMS > 64
        E32(v2_, hdr.d2) E32(v3_, hdr.d3)
#endif
#if AGG_ELEMS > 128
        E32(v4_, hdr.d4) E32(v5_, hdr.d5) E32(v6_, hdr.d6) E32(v7_, hdr.d7)
#endif
    }

    apply {
        if ((hdr.agg.flags & FLAG_RESULT) != 0) { stats.count(ST_BAD_FLAGS); drop(); return; }
        if (!job_table.apply().hit) { stats.count(ST_BAD_JOB); drop(); return; }
        if (hdr.agg.count != AGG_ELEMS) { stats.count(ST_BAD_COUNT); drop(); return; }
        if (hdr.agg.worker >= 32) { stats.count(ST_BAD_WORKER); drop(); return; }
        meta.wbit = (bit<32>)1 << (bit<8>)hdr.agg.worker;
        if ((meta.wbit & meta.members) == 0) { stats.count(ST_BAD_WORKER); drop(); return; }
        bit<16> index = hdr.agg.pool_index & 0x7fff;
        meta.slot = 0;
        if (index >= meta.limit) { stats.count(ST_BAD_INDEX); drop(); return; }
        if (index >= meta.size) {
            /* ATP: no switch aggregator for this index: the parameter server completes the sum */
            stats.count(ST_SPILL);
            hdr.agg.flags = hdr.agg.flags | FLAG_SPILL;
            hdr.ipv4.dst = meta.ps_ip;
            hdr.udp.checksum = 0;
            meta.route = 1;
            return;
        }
        meta.slot = ((bit<32>)(meta.base + index) << 1) | (bit<32>)(hdr.agg.pool_index >> 15);
        bit<32> bm;
        bitmap.read(bm, meta.slot);
        bit<8> count;
        contributions.read(count, meta.slot);
        bit<8> e;
        exponent.read(e, meta.slot);
        if ((bm & meta.wbit) == 0) {
            /* new contribution: the first one overwrites what the copy held two rounds ago */
            stats.count(ST_CONTRIB);
            meta.addm = 0xffffffff;
            if (bm == 0) {
                meta.keep = 0; count = 1; e = hdr.agg.exponent;
            } else {
                meta.keep = 0xffffffff; count = count + 1;
                if (hdr.agg.exponent > e) { e = hdr.agg.exponent; }
            }
            bitmap.write(meta.slot, bm | meta.wbit);
            contributions.write(meta.slot, count);
            exponent.write(meta.slot, e);
            bit<32> other;
            bitmap.read(other, meta.slot ^ 1);
            bitmap.write(meta.slot ^ 1, other & ~meta.wbit);
            aggregate();
            if (count != meta.nworkers) { drop(); return; }
            stats.count(ST_COMPLETE);
            /* from the aggregator's address: a host drops packets claiming its own source address */
            hdr.ipv4.src = hdr.ipv4.dst;
            sm.mcast_grp = meta.mgrp;
            meta.rewrite = 1;
        } else {
            if (count != meta.nworkers) { stats.count(ST_DUPLICATE); drop(); return; }
            /* retransmission after completion: the stored copy answers, to this worker only */
            stats.count(ST_SHADOW);
            meta.keep = 0xffffffff;
            meta.addm = 0;
            aggregate();
            bit<32> w = hdr.ipv4.src;
            hdr.ipv4.src = hdr.ipv4.dst;
            hdr.ipv4.dst = w;
            meta.route = 1;
        }
        hdr.agg.flags = hdr.agg.flags | FLAG_RESULT;
        hdr.agg.exponent = e;
        hdr.udp.dport = hdr.udp.sport;      /* every worker of a job listens on the same port */
        hdr.udp.sport = AGG_PORT;
        hdr.udp.checksum = 0;
    }
}

control AggIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    AggSlots() slots;

    action drop() { mark_to_drop(sm); }

    action route(bit<9> port, bit<48> dmac) {
        sm.egress_spec = port;
        hdr.eth.dst = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    table ipv4_route {
        key = { hdr.ipv4.dst: lpm; }
        actions = { route; drop; }
        default_action = drop();
        size = 1024;
    }

    /* destination addresses this switch aggregates for (its aggregator IP); elsewhere agg packets are
       routed like any other (a leaf forwards them up to the spine that aggregates). */
    /* results arriving from an upstream aggregator (spine) at a leaf: fan out to the local workers */
    action fan_out(bit<16> mgrp) { sm.mcast_grp = mgrp; meta.rewrite = 1; }
    table result_fanout {
        key = { hdr.agg.job: exact; hdr.ipv4.dst: exact; }   /* dst: the aggregator (not a unicast reply) */
        actions = { fan_out; NoAction; }
        default_action = NoAction();
        size = 64;
    }

    action aggregate_here() { }
    table agg_address {
        key = { hdr.ipv4.dst: exact; }
        actions = { aggregate_here; NoAction; }
        default_action = NoAction();
        size = 16;
    }

    apply {
        if (!hdr.ipv4.isValid()) { drop(); return; }
        meta.route = 1;
        if (hdr.agg.isValid()) {
            if ((hdr.agg.flags & FLAG_RESULT) != 0 && result_fanout.apply().hit) {
                /* a result multicast by the aggregator above (still addressed to it): fan out locally */
                meta.route = 0;
            } else if (agg_address.apply().hit) {
                meta.route = 0;
                slots.apply(hdr, meta, sm);
            }
        }
        if (meta.route == 1) { ipv4_route.apply(); }
    }
}

control AggEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    /* a multicast replica leaving on a host port is addressed to that host */
    action to_host(bit<48> mac, bit<32> ip) { hdr.eth.dst = mac; hdr.ipv4.dst = ip; }
    table port_host {
        key = { sm.egress_port: exact; }
        actions = { to_host; NoAction; }
        default_action = NoAction();
        size = 256;
    }
    apply {
        if (meta.rewrite == 1) { port_host.apply(); }
    }
}

control AggCompute(inout headers_t hdr, inout meta_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len, hdr.ipv4.identification,
              hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src,
              hdr.ipv4.dst },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control AggDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.eth); pkt.emit(hdr.ipv4); pkt.emit(hdr.udp); pkt.emit(hdr.agg);
        pkt.emit(hdr.d0);
#if AGG_ELEMS > 32
        pkt.emit(hdr.d1);
#endif
#if AGG_ELEMS > 64
        pkt.emit(hdr.d2); pkt.emit(hdr.d3);
#endif
#if AGG_ELEMS > 128
        pkt.emit(hdr.d4); pkt.emit(hdr.d5); pkt.emit(hdr.d6); pkt.emit(hdr.d7);
#endif
    }
}

V1Switch(AggParser(), AggVerify(), AggIngress(), AggEgress(), AggCompute(), AggDeparser()) main;
