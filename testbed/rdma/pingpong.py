"""``ibv_rc_pingpong`` with the soft-RDMA endpoint: the same TCP exchange (:mod:`testbed.rdma.interop`)
and the same data phase, so either side can be rdma-core's tool on a kernel rxe host::

    client                                         server (listens on TCP 18515)
      | --- 52 B "lid:qpn:psn:gid" ------------------> |  QP -> RTR/RTS
      | <-- 52 B "lid:qpn:psn:gid" ------------------- |
      | --- "done\\0" ---------------------------------> |
      | == SEND size B ==> (the server echoes what it received, as rc_pingpong's shared buffer does)
      | <== SEND size B ==   ... ``iters`` times each way, next SEND once the last SEND and RECV completed

The peer's RoCE address is the IP its GID names, on UDP 4791. The client's buffer is rc_pingpong's:
0x7b bytes, with the first byte of each page 0 under ``--chk``; every message received is compared
with it byte for byte.

``ibv_uc_pingpong`` is the same program on a UC QP. ``ibv_ud_pingpong`` exchanges the same records and
runs the same data phase on a UD QP (Q_Key 0x11111111, ud_pingpong.c): its SENDs are one packet (size
at most the MTU, default 1024), each receive has 40 bytes of GRH room before the payload, and its
buffer is ``size + 40`` bytes of 0x7b whose payload part is what the client sends.
"""

from __future__ import annotations

import random
import time

from testbed.console import console
from testbed.rdma.device import Device
from testbed.rdma.interop import (
    PINGPONG_DONE,
    PINGPONG_MSG_SIZE,
    PingpongDest,
    format_pingpong,
    gid_of_ip,
    parse_pingpong,
)
from testbed.rdma.listen import open_listener
from testbed.rdma.oob import DEFAULT_PORT, Channel, read_exact
from testbed.rdma.qp import GRH_LEN, QpConfig, Remote, UdDest
from testbed.rdma.verbs import CompletionQueue, RdmaError, WcOpcode, WcStatus
from testbed.roce.opcodes import ROCE_UDP_PORT

PAGE = 4096
RECV, SEND = 1, 2
#: ud_pingpong.c's Q_Key (its receive QP's and every SEND's remote_qkey)
UD_QKEY = 0x11111111
TRANSPORTS = ("rc", "uc", "ud")


def client_buffer(size: int, chk: bool) -> bytearray:
    """rc_pingpong.c: ``memset(ctx->buf, 0x7b, size)``; with --chk the client sets
    ``buf[i] = i / page_size % sizeof(char)`` (= 0) at every page start."""
    buf = bytearray(b"\x7b" * size)
    if chk:
        for i in range(0, size, PAGE):
            buf[i] = 0
    return buf


def serve_pingpong(bind: str | None = None, port: int = DEFAULT_PORT, size: int = 4096, iters: int = 1000,
                   rx_depth: int = 500, config: QpConfig | None = None, roce_port: int = ROCE_UDP_PORT,
                   peer_roce_port: int = ROCE_UDP_PORT, ready=None, timeout: float = 120.0,
                   chk: bool = False, transport: str = "rc") -> dict:
    """One {rc,uc,ud}_pingpong server run (the tool without a host name). Every message must equal the
    client's buffer (:func:`client_buffer`; ``chk``: the client ran with --chk)."""
    _check(transport, size, config)
    lsock, bind, why = open_listener(bind, port, 1)
    with lsock:
        if ready:
            ready(lsock.getsockname()[1])
        console.print(f"{transport}_pingpong server listening on {bind}:{lsock.getsockname()[1]} ({why})")
        conn, _peer = lsock.accept()
    with conn:
        peer = parse_pingpong(read_exact(conn, PINGPONG_MSG_SIZE, "its address"))
        local_ip = conn.getsockname()[0]
        with Device(local_ip, roce_port) as dev:
            qp, my = _qp(dev, config, transport)
            _connect(dev, qp, my, peer, peer_roce_port)
            conn.sendall(format_pingpong(my))
            read_exact(conn, len(PINGPONG_DONE), '"done"')
            return _run(dev, qp, my, peer, size, iters, rx_depth, None, timeout, bytes(client_buffer(size, chk)),
                        peer_roce_port)


def pingpong_client(host: str, port: int = DEFAULT_PORT, size: int = 4096, iters: int = 1000,
                    rx_depth: int = 500, chk: bool = False, config: QpConfig | None = None,
                    roce_port: int = ROCE_UDP_PORT, peer_roce_port: int = ROCE_UDP_PORT,
                    connect_wait: float = 0.0, timeout: float = 120.0, transport: str = "rc") -> dict:
    """One {rc,uc,ud}_pingpong client run against ``host`` (ibv_*_pingpong or :func:`serve_pingpong`)."""
    _check(transport, size, config)
    chan = Channel.connect(host, port, wait=connect_wait)
    sock = chan.sock
    try:
        with Device(chan.local_ip, roce_port) as dev:
            qp, my = _qp(dev, config, transport)
            sock.sendall(format_pingpong(my))
            peer = parse_pingpong(read_exact(sock, PINGPONG_MSG_SIZE, "its address"))
            sock.sendall(PINGPONG_DONE)
            _connect(dev, qp, my, peer, peer_roce_port)
            return _run(dev, qp, my, peer, size, iters, rx_depth, client_buffer(size, chk), timeout,
                        peer_roce_port=peer_roce_port)
    finally:
        chan.close()


def _check(transport: str, size: int, config: QpConfig | None) -> None:
    if transport not in TRANSPORTS:
        raise RdmaError(f"pingpong transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
    mtu = (config or QpConfig()).mtu
    if transport == "ud" and size > mtu:
        raise RdmaError(f"ud_pingpong sends one packet: size {size} exceeds the MTU {mtu}")


def _qp(dev: Device, config, transport: str):
    psn = random.getrandbits(24)
    qp = dev.create_qp(dev.alloc_pd(), CompletionQueue(), config or QpConfig(), transport=transport, qkey=UD_QKEY,
                       psn=psn)
    return qp, PingpongDest(0, qp.qpn, psn, gid_of_ip(dev.ip))


def _connect(dev: Device, qp, my: PingpongDest, peer: PingpongDest, peer_roce_port: int) -> None:
    """RC/UC: to RTR/RTS with the peer's QPN and PSN (a UD QP is ready from its creation)."""
    if qp.transport != "ud":
        dev.connect(qp, Remote(peer.qpn, peer.psn, peer.ip, peer_roce_port), my.psn)


def _run(dev: Device, qp, my: PingpongDest, peer: PingpongDest, size: int, iters: int, rx_depth: int,
         buf: bytearray | None, timeout: float, expect: bytes | None = None,
         peer_roce_port: int = ROCE_UDP_PORT) -> dict:
    """The data phase of rc_pingpong; ``buf`` is the client's buffer (None: the server echoes what it
    receives, as rc_pingpong's one buffer for SEND and RECV does, and checks it against ``expect``).
    UD: each receive has GRH room before the payload; each SEND names the peer's QP and Q_Key."""
    pd = qp.pd
    cq = qp.cq
    grh = GRH_LEN if qp.transport == "ud" else 0
    dest = UdDest(peer.ip, peer_roce_port, peer.qpn, UD_QKEY) if grh else None
    slot = max(1, size) + grh
    slots = bytearray(slot * rx_depth)
    rmr = pd.reg_mr(slots)
    for k in range(rx_depth):
        qp.post_recv(k, rmr, k * slot, size + grh)
    smr = pd.reg_mr(bytearray(buf) if buf is not None else bytearray(max(1, size)))
    want = bytes(buf) if buf is not None else expect
    echo = buf is None
    scnt = rcnt = bad = 0
    pending = RECV
    if buf is not None:
        qp.post_send(1 << 40, smr, 0, size, dest=dest)
        pending |= SEND
    start = time.monotonic()
    deadline = start + timeout
    while scnt < iters or rcnt < iters:
        dev.progress(timeout=0.002)
        for wc in cq.poll(64):
            if wc.status is not WcStatus.SUCCESS:
                raise RdmaError(f"{qp.transport}_pingpong: work completion {wc.status.value}; QP: {qp.error}")
            if wc.opcode is WcOpcode.SEND:
                scnt += 1
                pending &= ~SEND
            else:
                k = wc.wr_id
                got = slots[k * slot + grh:k * slot + wc.byte_len]
                if echo and rcnt == 0:
                    smr.view[:size] = got   # the server sends back what it got
                if want is None:
                    want = bytes(got)
                elif got != want:
                    bad += 1
                rcnt += 1
                qp.post_recv(k, rmr, k * slot, size + grh)
                pending &= ~RECV
            if scnt < iters and not pending:
                qp.post_send(1 << 40, smr, 0, size, dest=dest)
                pending = RECV | SEND
        if time.monotonic() > deadline:
            raise RdmaError(f"{qp.transport}_pingpong did not finish within {timeout:g} s ({scnt} sent, {rcnt} received)")
    seconds = time.monotonic() - start
    nbytes = 2 * size * iters
    return {"transport": qp.transport, "local": {"lid": my.lid, "qpn": my.qpn, "psn": my.psn, "gid": my.gid.hex(), "ip": dev.ip},
            "remote": {"lid": peer.lid, "qpn": peer.qpn, "psn": peer.psn, "gid": peer.gid.hex(), "ip": peer.ip},
            "size": size, "iters": iters, "seconds": seconds, "bytes": nbytes,
            "mbit_per_s": nbytes * 8 / seconds / 1e6 if seconds else 0.0,
            "usec_per_iter": seconds * 1e6 / iters if iters else 0.0, "bad_messages": bad,
            "verified": bad == 0 and rcnt == iters, "retransmissions": qp.stats.retransmissions}


def report_text(r: dict) -> str:
    """rc_pingpong's own lines (rc_pingpong.c prints the addresses, then bytes/s and usec/iter)."""
    def addr(side, d):
        import ipaddress

        a = ipaddress.IPv6Address(bytes.fromhex(d["gid"]))
        gid = f"::ffff:{a.ipv4_mapped}" if a.ipv4_mapped else str(a)  # as glibc's inet_ntop writes it
        return f"  {side} address:  LID 0x{d['lid']:04x}, QPN 0x{d['qpn']:06x}, PSN 0x{d['psn']:06x}, GID {gid}"

    return "\n".join([addr("local", r["local"]), addr("remote", r["remote"]),
                      f"{r['bytes']} bytes in {r['seconds']:.2f} seconds = {r['mbit_per_s']:.2f} Mbit/sec",
                      f"{r['iters']} iters in {r['seconds']:.2f} seconds = {r['usec_per_iter']:.2f} usec/iter",
                      f"verified {r['verified']} ({r['bad_messages']} messages differed)"])
