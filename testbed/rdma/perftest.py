"""perftest's own control protocol, so rdma-core's ``ib_write_bw`` / ``ib_read_bw`` / ``ib_send_bw`` /
``ib_atomic_bw`` on a kernel rxe host can use the soft-RDMA endpoint as their server (``testbed rdma
perftest-server``); the client side is :mod:`testbed.rdma.perftest_client`.

The protocol is that of perftest 6.06 (Debian 12's ``perftest 4.5+0.17``, src/perftest_communication.c and
src/write_bw.c at tag v4.5-0.17), TCP port 18515, the client speaks first in every exchange and the
server answers with a field of the same size::

    version       16 B  char[MAX_VERSION], NUL padded ("6.06"; the client refuses a server below 5.70)
    cycle buffer   4 B  int, network order (page size)          } check_sys_data, peers >= 5.32;
    cache line     4 B  int, network order                      }   each side keeps the maximum
    MTU            2 B  "%d" of enum ibv_mtu ("3" = 1024) + NUL  check_mtu, peers >= 5.31; the minimum wins
    per QP       108 B  "lid:out_reads:qpn:psn:rkey:vaddr:16 GID bytes:srqn:"  (59 B without a GID, IB)
      ... both sides move their QPs to RTR/RTS ...
    per QP       108 B  the same records again (printed as "remote address")
    barrier      108 B  QP 0's record                          ("an additional handshake after RTR")
      ... the client runs the test; the server (half duplex) only waits ...
    barrier      108 B  QP 0's record                          (the client has finished)
    report       8+8+8+8+8 B  size (u64), iters (u64, peers >= 5.33), bw_peak, bw_avg (MB/s),
                            msgRate_avg (Mpps), doubles byte-swapped to network order (xchg_bw_reports)
    close        108 B  QP 0's record, then "done\\0" from each side (ctx_close_connection)

``ib_atomic_bw`` (src/atomic_bw.c) runs the exchange of ``ib_write_bw``. ``ib_send_bw`` (src/send_bw.c)
puts its post-RTR barrier *before* the second round of records, adds a barrier once its receives are posted, and its half-duplex server neither barriers after the test nor
exchanges a report: after the test comes the close directly.

For WRITE the client writes message ``k`` to ``vaddr + (k mod n) * INC(size, cache_line)`` with
``n = cycle_buffer / INC(size, cache_line)`` (1 when ``size > cycle_buffer / 2``; perftest_resources.h
``INC``, ``increase_rem_addr``, ``BUFF_SIZE``), so the server's region is ``max(size, cycle_buffer)`` rounded up to the cache line; READ reads the same way;
SEND lands in the receives the server posts (``rx_depth``, perftest's default 512). Atomics go to
``vaddr + (k mod n) * INC(8, cache_line)`` always (``increase_rem_addr`` for ATOMIC): fetch-and-add adds
``ATOMIC_ADD_VALUE`` (1), compare-and-swap (``-A CMP_AND_SWAP``) compares with 0 and swaps in
``ATOMIC_SWAP_VALUE`` (0) (perftest_resources.h), on the server's random buffer.
Perftest fills its buffers with ``rand()``; what arrived is reported as SHA-256 digests, to compare with
the packets' payloads in a capture: of the region after the test (WRITE), of the SEND payloads in
completion order (SEND), and of the random bytes served, the message slots in order (READ); for atomics
the region before and after the test (hex).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import select
import socket
import struct
import time

from testbed.console import console
from testbed.rdma.device import Device
from testbed.rdma.interop import (
    PERFTEST_KEY_SIZE,
    PERFTEST_KEY_SIZE_GID,
    PerftestDest,
    format_perftest,
    gid_of_ip,
    parse_perftest,
)
from testbed.rdma.listen import open_listener
from testbed.rdma.oob import DEFAULT_PORT, read_exact
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

#: The perftest version this side announces and whose protocol it speaks.
VERSION = "6.06"
MAX_VERSION = 16
CYCLE_BUFFER = 4096
CACHE_LINE = 64
#: enum ibv_mtu
MTU_ENUM = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
VERBS = ("write", "read", "send", "atomic")
#: perftest -A: ATOMIC_ADD_VALUE / ATOMIC_SWAP_VALUE (compare_add left 0), perftest_resources.h
ATOMIC_OPS = {"faa": (1, 0), "cas": (0, 0)}
RX_DEPTH = 512
OUT_READS = 16
_REPORT = struct.Struct("!QQ")


def xchg(sock: socket.socket, mine: bytes, what: str, timeout: float, client: bool) -> bytes:
    """``ctx_xchg_data``: the client writes its field then reads the server's, the server the other way
    round; both fields have the same size."""
    if client:
        sock.sendall(mine)
    theirs = read_exact(sock, len(mine), what, timeout, peer="perftest peer")
    if not client:
        sock.sendall(mine)
    return theirs


def _read_record(sock: socket.socket, timeout: float) -> PerftestDest:
    """One connection record; its size (108 B with a GID, 59 B without) is told by its 53rd byte."""
    head = read_exact(sock, PERFTEST_KEY_SIZE, "a connection record", timeout, peer="perftest peer")
    if head[52:53] == b":":
        head += read_exact(sock, PERFTEST_KEY_SIZE_GID - PERFTEST_KEY_SIZE, "a connection record", timeout,
                           peer="perftest peer")
    return parse_perftest(head)


def hand_shake(conn: socket.socket, mine: PerftestDest, timeout: float, client: bool) -> PerftestDest:
    """``ctx_hand_shake``: one record each way (the client's first); with QP 0's records, a barrier."""
    if client:
        conn.sendall(format_perftest(mine))
    theirs = _read_record(conn, timeout)
    if not client:
        conn.sendall(format_perftest(mine))
    return theirs


def negotiate(sock: socket.socket, cfg: QpConfig, client: bool, step: float = 60.0) -> tuple:
    """Version, ``check_sys_data`` and ``check_mtu``: (peer's version text, its value, cycle buffer,
    cache line, ``cfg`` with the agreed MTU)."""
    their_version = xchg(sock, VERSION.encode().ljust(MAX_VERSION, b"\0"), "its version", step,
                         client).split(b"\0", 1)[0].decode("ascii", "replace")
    rem = version_ok(their_version)
    cycle = max(CYCLE_BUFFER, struct.unpack("!i", xchg(sock, struct.pack("!i", CYCLE_BUFFER), "its page size",
                                                       step, client))[0])
    line = max(CACHE_LINE, struct.unpack("!i", xchg(sock, struct.pack("!i", CACHE_LINE), "its cache line size",
                                                    step, client))[0])
    mtu_theirs = xchg(sock, b"%d\0" % MTU_ENUM[cfg.mtu], "its MTU", step, client)
    try:
        mtu_enum = min(int(mtu_theirs.split(b"\0", 1)[0]), MTU_ENUM[cfg.mtu])
    except ValueError:
        raise RdmaError(f"perftest peer sent MTU {mtu_theirs!r}, not an enum ibv_mtu") from None
    mtu = {v: k for k, v in MTU_ENUM.items()}.get(mtu_enum)
    if mtu is None:
        raise RdmaError(f"perftest peer sent MTU enum {mtu_enum}, not 1..5")
    if mtu != cfg.mtu:
        cfg = dataclasses.replace(cfg, mtu=mtu)
    return their_version, rem, cycle, line, cfg


def version_ok(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RdmaError(f"perftest peer sent version {text!r}, not a number") from None
    if value < 5.70:
        raise RdmaError(f"perftest peer version {text} is older than 5.70 (perftest refuses those too)")
    return value


def region_size(size: int, cycle_buffer: int, cache_line: int) -> int:
    """Bytes perftest's client touches at the server: BUFF_SIZE(size, cycle) rounded up to the line."""
    span = max(size, cycle_buffer)
    return -(-span // cache_line) * cache_line


def slot_stride(size: int, cache_line: int) -> int:
    """perftest_resources.h ``INC(size, cache_line_size)``: the size rounded up to the cache line."""
    return -(-size // cache_line) * cache_line if size > cache_line else cache_line


def slots(size: int, cycle_buffer: int, cache_line: int) -> int:
    """How many message slots perftest's client cycles through: ``increase_rem_addr`` /
    ``increase_loc_addr`` run only for ``size <= cycle_buffer / 2`` and wrap every ``cycle / INC`` messages."""
    return cycle_buffer // slot_stride(size, cache_line) if size <= cycle_buffer // 2 else 1


def slot_bytes(region, size: int, cycle_buffer: int, cache_line: int, nqps: int) -> bytes:
    """The bytes of every message slot of every QP, in order: what a READ client can bring back."""
    span, stride = region_size(size, cycle_buffer, cache_line), slot_stride(size, cache_line)
    return b"".join(bytes(region[i * span + j * stride:i * span + j * stride + size])
                    for i in range(nqps) for j in range(slots(size, cycle_buffer, cache_line)))


def exchange_fields(rem_version: float) -> tuple:
    """``xchg_bw_reports``' fields in order, each swapped in its own ``ctx_xchg_data``."""
    return (("size", "!Q"), ("iters", "!Q" if rem_version >= 5.33 else "!I"), ("bw_peak_MBps", "!d"),
            ("bw_avg_MBps", "!d"), ("msg_rate_Mpps", "!d"))


def serve_perftest(verb: str = "write", size: int = 65536, qps: int = 1, bind: str | None = None,
                   port: int = DEFAULT_PORT, config: QpConfig | None = None, roce_port: int = ROCE_UDP_PORT,
                   peer_roce_port: int = ROCE_UDP_PORT, ready=None, timeout: float = 300.0,
                   seed: int | None = None) -> dict:
    """Serve one perftest client (``ib_{verb}_bw -s size -q qps``, RC, half duplex) and return its report
    (``atomic``: ``ib_atomic_bw``, whose size is always 8).

    Raises:
        RdmaError: the client broke the protocol, or the test did not finish within ``timeout``.
    """
    if verb not in VERBS:
        raise RdmaError(f"perftest verb must be one of {', '.join(VERBS)}, got {verb!r}")
    if verb == "atomic":
        size = 8
    cfg = config or QpConfig()
    lsock, bind, why = open_listener(bind, port, 1)
    with lsock:
        if ready:
            ready(lsock.getsockname()[1])
        console.print(f"perftest ({VERSION}) {verb} server listening on {bind}:{lsock.getsockname()[1]} ({why})")
        conn, _peer = lsock.accept()
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        their_version, rem, cycle, line, cfg = negotiate(conn, cfg, client=False)
        local_ip = conn.getsockname()[0]
        with Device(local_ip, roce_port) as dev:
            return _serve(conn, dev, verb, size, qps, cfg, cycle, line, rem, their_version, peer_roce_port,
                          timeout, seed)


def _serve(conn, dev: Device, verb: str, size: int, nqps: int, cfg: QpConfig, cycle: int, line: int,
           rem: float, their_version: str, peer_roce_port: int, timeout: float, seed) -> dict:
    step = 60.0
    rng = random.Random(seed)
    pd, cq = dev.alloc_pd(), CompletionQueue()
    span = region_size(size, cycle, line)
    if verb == "send":
        region = bytearray(max(1, size) * RX_DEPTH * nqps)
    else:
        region = bytearray(span * nqps)
        if verb in ("read", "atomic"):   # perftest fills its buffers with rand() (create_single_mr)
            region[:] = rng.randbytes(len(region))
    served = hashlib.sha256(slot_bytes(region, size, cycle, line, nqps)).hexdigest() if verb == "read" else None
    before = bytes(region) if verb == "atomic" else None
    mr = pd.reg_mr(region, LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC)
    qps, mine, theirs = [], [], []
    for i in range(nqps):
        peer = _read_record(conn, step)   # the server creates its QP on the client's record
        if peer.gid is None:
            raise RdmaError("perftest client sent no GID: on RoCE run it with -x GID_INDEX (or a RoCE device)")
        qp = dev.create_qp(pd, cq, cfg)
        psn = rng.getrandbits(24)
        me = PerftestDest(0, OUT_READS, qp.qpn, psn, mr.rkey, mr.addr + i * span, gid_of_ip(dev.ip), 0)
        conn.sendall(format_perftest(me))
        dev.connect(qp, Remote(peer.qpn, peer.psn, peer.ip, peer_roce_port), psn)
        if verb == "send":
            for k in range(RX_DEPTH):
                wr = i * RX_DEPTH + k
                qp.post_recv(wr, mr, wr * max(1, size), size)
        qps.append(qp)
        mine.append(me)
        theirs.append(peer)
    if verb == "send":              # send_bw.c: the barrier after RTR comes before the second round
        hand_shake(conn, mine[0], step, client=False)
    for i in range(nqps):           # the "remote address" round, after both sides reached RTS
        hand_shake(conn, mine[i], step, client=False)
    hand_shake(conn, mine[0], step, client=False)   # write_bw.c: after RTR; send_bw.c: receives posted, test starts
    by_qpn = {qp.qpn: qp for qp in qps}
    received = errors = 0
    sends = hashlib.sha256()        # SEND payloads in completion order
    start = time.monotonic()
    first = last = None
    seen = 0
    deadline = start + timeout
    conn.setblocking(False)
    while not select.select([conn], [], [], 0)[0]:   # the client's end-of-test barrier
        # idle waits block on the RoCE socket (and QP timers): the client calibrates its cycle counter
        # after the test, and a busy server on the same (virtual) CPUs spoils that
        dev.progress(timeout=0.05)
        for wc in cq.poll(64):
            if wc.status is not WcStatus.SUCCESS:
                errors += 1
                continue
            received += 1
            off = wc.wr_id * max(1, size)
            sends.update(region[off:off + wc.byte_len])
            by_qpn[wc.qp_num].post_recv(wc.wr_id, mr, wc.wr_id * max(1, size), size)
        rx = dev.stats["rx"]
        if rx != seen:
            seen, last = rx, time.monotonic()
            first = first or last
        if time.monotonic() > deadline:
            raise RdmaError(f"perftest {verb} test did not end within {timeout:g} s "
                            f"({dev.stats['rx']} packets received)")
    conn.setblocking(True)
    their = {}
    if verb != "send":              # send_bw's half-duplex server goes straight to closing
        hand_shake(conn, mine[0], step, client=False)
        # xchg_bw_reports: size, iters, bw_peak, bw_avg, msgRate_avg (the server's own report is zeros,
        # as perftest's half-duplex server sends its never-filled my_bw_rep).
        for name, fmt in exchange_fields(rem):
            n = struct.calcsize(fmt)
            their[name] = struct.unpack(fmt, xchg(conn, bytes(n), "its bandwidth report", step, client=False))[0]
    hand_shake(conn, mine[0], step, client=False)   # ctx_close_connection
    done = read_exact(conn, 5, '"done"', step, peer="perftest peer")
    try:
        conn.sendall(b"done\0")   # the client may already have closed: it never reads this
    except OSError:
        pass
    stats = [qp.stats for qp in qps]
    report = {
        "verb": verb, "size": size, "qps": nqps, "client_version": their_version, "mtu": cfg.mtu,
        "cycle_buffer": cycle, "cache_line": line,
        "local": [{"qpn": m.qpn, "psn": m.psn, "rkey": m.rkey, "vaddr": m.vaddr, "ip": dev.ip} for m in mine],
        "remote": [{"qpn": t.qpn, "psn": t.psn, "ip": t.ip} for t in theirs],
        "client_report": their, "done": done == b"done\0",
        "received_sends": received, "completion_errors": errors,
        "rx_packets": dev.stats["rx"], "rx_icrc_bad": dev.stats["rx_icrc_bad"],
        "rx_seconds": (last - first) if first and last else 0.0,
        "retransmissions": sum(s.retransmissions for s in stats),
        "qp_states": [qp.state.value for qp in qps],
    }
    if verb == "read":
        report["sha256_served"] = served
    elif verb == "atomic":
        report["region_before"], report["region_after"] = before.hex(), bytes(region).hex()
        report["atomics_rx"] = sum(s.atomics_rx for s in stats)
    elif verb == "send":
        report["sha256_sends"] = sends.hexdigest()
    else:
        report["sha256_region"] = hashlib.sha256(region).hexdigest()
        report["region_bytes"] = len(region)
    report["bytes_in"] = received * size if verb == "send" else len(region)
    return report


def report_text(r: dict) -> str:
    c = r["client_report"]
    head = [f"perftest {r['verb']} server ({VERSION}) for a {r['client_version']} client: {r['qps']} QP(s), "
             f"{r['size']} B messages, MTU {r['mtu']}"]
    lines = head
    for loc, rem in zip(r["local"], r["remote"], strict=True):
        lines.append(f"  local QPN {loc['qpn']:#08x} PSN {loc['psn']:#08x} RKey {loc['rkey']:#010x} "
                     f"VAddr {loc['vaddr']:#018x}  remote QPN {rem['qpn']:#08x} PSN {rem['psn']:#08x} {rem['ip']}")
    if not c:
        lines.append(f"received {r['received_sends']} SENDs of {r['size']} B in {r['rx_seconds']:.2f} s "
                     f"(ib_send_bw reports nothing to its server)")
    else:
        lines.append(f"client's report: {c['iters']} iterations of {c['size']} B, BW average "
                     f"{c['bw_avg_MBps']:.2f} MB/s ({c['bw_avg_MBps'] * 8:.2f} Mbit/s), peak "
                     f"{c['bw_peak_MBps']:.2f} MB/s, {c['msg_rate_Mpps'] * 1e6:.0f} msg/s")
    if "atomics_rx" in r:
        lines.append(f"executed {r['atomics_rx']} atomics on {len(r['region_after']) // 2} B")
    lines.append(f"server: {r['rx_packets']} packets in, {r['retransmissions']} retransmitted by us, "
                 f"QPs {', '.join(r['qp_states'])}, "
                 + " ".join(f"{k} {v[:16]}" for k, v in r.items() if k.startswith("sha256")))
    return "\n".join(lines)
