"""The client of perftest's control protocol (:mod:`testbed.rdma.perftest` describes the exchange), so the
soft-RDMA endpoint can run ``ib_write_bw`` / ``ib_read_bw`` / ``ib_send_bw`` / ``ib_atomic_bw``'s test
against their servers on a kernel rxe host (``testbed rdma perftest-client HOST``).

It does what perftest's client does, RC, half duplex: it speaks first in every exchange; each of its
``qps`` QPs sends ``iters`` messages (perftest's ``-n`` is per QP), at most ``tx_depth`` outstanding,
message ``k`` from local and to remote ``(k mod n) * INC(size, cache_line)`` (:func:`slots`); its
buffers are random as perftest's. What went where is reported so a capture (or the soft server's
report) can confirm it byte for byte: the SHA-256 of the server's region as the WRITEs leave it (zero
between slots; WRITE), of the SEND payloads
of each QP in order, of the message slots read back (READ: the server's when every slot was read), and
for atomics each slot's first and last original value and count (fetch-and-add: each original one more
than the last; compare-and-swap of 0 with 0, as perftest's ``-A CMP_AND_SWAP``: each the same).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import socket
import struct
import time

from testbed.poll import poll
from testbed.rdma.device import Device
from testbed.rdma.interop import PerftestDest, gid_of_ip
from testbed.rdma.oob import DEFAULT_PORT
from testbed.rdma.perftest import (
    ATOMIC_OPS,
    OUT_READS,
    VERBS,
    VERSION,
    exchange_fields,
    hand_shake,
    negotiate,
    region_size,
    slot_bytes,
    slot_stride,
    slots,
    xchg,
)
from testbed.rdma.qp import QpConfig, Remote
from testbed.rdma.verbs import (
    LOCAL_WRITE,
    REMOTE_ATOMIC,
    REMOTE_READ,
    REMOTE_WRITE,
    CompletionQueue,
    RdmaError,
    WcStatus,
)
from testbed.roce.opcodes import ROCE_UDP_PORT

#: perftest's default tx depth (-t) for the bandwidth tests
TX_DEPTH = 128
_MASK64 = (1 << 64) - 1


def _connect(host: str, port: int, wait: float) -> socket.socket:
    def attempt():
        return socket.create_connection((host, port), timeout=10)

    try:
        sock = poll(attempt, wait, 0.05, f"perftest server at {host}:{port}") if wait > 0 else attempt()
    except (OSError, TimeoutError) as exc:
        raise RdmaError(f"cannot reach a perftest server at {host}:{port} "
                        f"({getattr(exc, 'strerror', None) or exc}); is ib_<verb>_bw (without a host) or "
                        "'testbed rdma perftest-server' running there?") from exc
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def perftest_client(host: str, verb: str = "write", size: int = 65536, qps: int = 1, iters: int = 1000,
                    port: int = DEFAULT_PORT, config: QpConfig | None = None, atomic: str = "faa",
                    tx_depth: int = TX_DEPTH, roce_port: int = ROCE_UDP_PORT, peer_roce_port: int = ROCE_UDP_PORT,
                    connect_wait: float = 0.0, timeout: float = 300.0, seed: int | None = None) -> dict:
    """Run ``ib_{verb}_bw HOST -s size -q qps -n iters``'s client side against a perftest server.

    Raises:
        RdmaError: the server broke the protocol, a work request failed, or the test outlasted ``timeout``.
    """
    if verb not in VERBS:
        raise RdmaError(f"perftest verb must be one of {', '.join(VERBS)}, got {verb!r}")
    if atomic not in ATOMIC_OPS:
        raise RdmaError(f"atomic op must be one of {', '.join(ATOMIC_OPS)}, got {atomic!r}")
    if verb == "atomic":
        size = 8
    sock = _connect(host, port, connect_wait)
    with sock:
        their_version, rem, cycle, line, cfg = negotiate(sock, config or QpConfig(), client=True)
        with Device(sock.getsockname()[0], roce_port) as dev:
            return _run(sock, dev, verb, size, qps, iters, cfg, cycle, line, rem, their_version, atomic,
                        tx_depth, peer_roce_port, timeout, seed)


def _run(sock, dev: Device, verb: str, size: int, nqps: int, iters: int, cfg: QpConfig, cycle: int, line: int,
         rem: float, their_version: str, atomic: str, tx_depth: int, peer_roce_port: int, timeout: float,
         seed) -> dict:
    step = 60.0
    rng = random.Random(seed)
    pd, cq = dev.alloc_pd(), CompletionQueue()
    span, n, stride = region_size(size, cycle, line), slots(size, cycle, line), slot_stride(size, line)
    region = bytearray(rng.randbytes(span * nqps)) if verb in ("write", "send") else bytearray(span * nqps)
    mr = pd.reg_mr(region, LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC)
    qps, mine, theirs = [], [], []
    for i in range(nqps):
        qp = dev.create_qp(pd, cq, cfg)
        me = PerftestDest(0, OUT_READS, qp.qpn, rng.getrandbits(24), mr.rkey, mr.addr + i * span,
                          gid_of_ip(dev.ip), 0)
        peer = hand_shake(sock, me, step, client=True)
        if peer.gid is None:
            raise RdmaError("perftest server sent no GID: on RoCE run it with -x GID_INDEX (or a RoCE device)")
        qps.append(qp)
        mine.append(me)
        theirs.append(peer)
    for qp, me, peer in zip(qps, mine, theirs, strict=True):
        # READs/atomics outstanding: at most what the server's QP takes in (its record's out_reads)
        qp.cfg = dataclasses.replace(qp.cfg, max_rd_atomic=max(1, min(cfg.max_rd_atomic, peer.out_reads)))
        dev.connect(qp, Remote(peer.qpn, peer.psn, peer.ip, peer_roce_port), me.psn)
    if verb == "send":              # send_bw.c: the barrier after RTR comes before the second round
        hand_shake(sock, mine[0], step, client=True)
    for i in range(nqps):           # the "remote address" round
        hand_shake(sock, mine[i], step, client=True)
    hand_shake(sock, mine[0], step, client=True)   # after RTR (send_bw: the server's receives are posted)
    add, compare = ATOMIC_OPS[atomic]
    posted, done = [0] * nqps, [0] * nqps
    sends = [hashlib.sha256() for _ in range(nqps)]
    seen: list[dict[int, list[int]]] = [{} for _ in range(nqps)]   # atomics: slot -> [first, last, count]
    start = time.monotonic()
    deadline = start + timeout
    while min(done) < iters:
        for i, qp in enumerate(qps):
            while posted[i] < iters and posted[i] - done[i] < tx_depth:
                k = posted[i]
                off, roff = i * span + (k % n) * stride, theirs[i].vaddr + (k % n) * stride
                wr = i << 32 | k
                if verb == "write":
                    qp.post_write(wr, mr, off, size, roff, theirs[i].rkey)
                elif verb == "read":
                    qp.post_read(wr, mr, off, size, roff, theirs[i].rkey)
                elif verb == "send":
                    qp.post_send(wr, mr, off, size)
                    sends[i].update(region[off:off + size])
                else:
                    qp.post_atomic(wr, mr, off, roff, theirs[i].rkey, atomic, add, compare)
                posted[i] += 1
        dev.progress(timeout=0.002)
        for wc in cq.poll(64):
            i, k = wc.wr_id >> 32, wc.wr_id & 0xFFFF_FFFF
            if wc.status is not WcStatus.SUCCESS:
                raise RdmaError(f"perftest {verb}: work request {k} of QP {i} failed: {wc.status.value}; "
                                f"QP: {qps[i].error}")
            done[i] += 1
            if verb == "atomic":
                off = i * span + (k % n) * stride
                _saw(seen[i], k % n, int.from_bytes(region[off:off + 8], "little"), add)
        if time.monotonic() > deadline:
            raise RdmaError(f"perftest {verb} test did not end within {timeout:g} s ({sum(done)} of "
                            f"{iters * nqps} completed)")
    seconds = time.monotonic() - start
    total = iters * nqps            # perftest's report counts the messages of every QP (ib_write_bw -q 2 -n 100: 200)
    mbps = size * total / seconds / 2 ** 20 if seconds else 0.0
    mine_rep = {"size": size, "iters": total, "bw_peak_MBps": mbps, "bw_avg_MBps": mbps,
                "msg_rate_Mpps": total / seconds / 1e6 if seconds else 0.0}
    server = {}
    if verb != "send":              # send_bw's half-duplex server goes straight to closing
        hand_shake(sock, mine[0], step, client=True)
        for name, fmt in exchange_fields(rem):
            server[name] = struct.unpack(fmt, xchg(sock, struct.pack(fmt, mine_rep[name]), "its bandwidth report",
                                                   step, client=True))[0]
    hand_shake(sock, mine[0], step, client=True)   # ctx_close_connection
    sock.sendall(b"done\0")
    sock.settimeout(step)
    try:
        closed = sock.recv(5) == b"done\0"
    except OSError:
        closed = False
    stats = [qp.stats for qp in qps]
    report = {
        "verb": verb, "size": size, "qps": nqps, "iters_per_qp": iters, "server_version": their_version, "mtu": cfg.mtu,
        "cycle_buffer": cycle, "cache_line": line, "seconds": seconds, **mine_rep,
        "local": [{"qpn": m.qpn, "psn": m.psn, "rkey": m.rkey, "vaddr": m.vaddr, "ip": dev.ip} for m in mine],
        "remote": [{"qpn": t.qpn, "psn": t.psn, "rkey": t.rkey, "vaddr": t.vaddr, "ip": t.ip,
                    "out_reads": t.out_reads} for t in theirs],
        "server_report": server, "done": closed, "completed": sum(done),
        "tx_packets": sum(s.tx_packets for s in stats), "retransmissions": sum(s.retransmissions for s in stats),
        "rx_icrc_bad": dev.stats["rx_icrc_bad"], "qp_states": [qp.state.value for qp in qps],
    }
    if verb == "write":   # the server's region as the WRITEs leave it, the bytes between slots zero
        written = bytearray(len(region))
        for i in range(nqps):
            for j in range(min(n, iters)):
                off = i * span + j * stride
                written[off:off + size] = region[off:off + size]
        report["sha256_written"] = hashlib.sha256(written).hexdigest()
        report["region_bytes"] = len(region)
    elif verb == "read":
        report["sha256_read"] = hashlib.sha256(slot_bytes(region, size, cycle, line, nqps)).hexdigest()
        report["every_slot_read"] = iters >= n
    elif verb == "send":
        report["sha256_sends"] = [h.hexdigest() for h in sends]
    else:
        report["atomic"] = atomic
        report["atomic_slots"] = [{str(j): v for j, v in sorted(s.items())} for s in seen]
        report["atomic_in_order"] = all(v[3] for s in seen for v in s.values())
    return report


def _saw(slots_seen: dict, slot: int, value: int, add: int) -> None:
    """Record an atomic's original value: per slot [first, last, count, every step as the op predicts]."""
    got = slots_seen.get(slot)
    if got is None:
        slots_seen[slot] = [value, value, 1, True]
        return
    expect = (got[1] + add) & _MASK64 if add else (0 if got[1] == 0 else got[1])
    got[3] = got[3] and value == expect
    got[1] = value
    got[2] += 1


def report_text(r: dict) -> str:
    lines = [f"perftest {r['verb']} client ({VERSION}) against a {r['server_version']} server: {r['qps']} QP(s), "
             f"{r['size']} B messages, MTU {r['mtu']}"]
    for loc, rem in zip(r["local"], r["remote"], strict=True):
        lines.append(f"  local QPN {loc['qpn']:#08x} PSN {loc['psn']:#08x}  remote QPN {rem['qpn']:#08x} "
                     f"PSN {rem['psn']:#08x} RKey {rem['rkey']:#010x} VAddr {rem['vaddr']:#018x} {rem['ip']}")
    lines.append(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
    lines.append(f" {r['size']:<10} {r['iters']:<14} {r['bw_peak_MBps']:>15.2f} {r['bw_avg_MBps']:>21.2f} "
                 f"{r['msg_rate_Mpps']:>15.6f}")
    extra = " ".join(f"{k} {v if isinstance(v, bool) else str(v)[:16]}" for k, v in r.items()
                     if k.startswith("sha256") or k in ("atomic", "atomic_in_order", "every_slot_read"))
    lines.append(f"client: {r['tx_packets']} packets out, {r['retransmissions']} retransmitted, "
                 f"QPs {', '.join(r['qp_states'])}, closed {r['done']} {extra}")
    return "\n".join(lines)
