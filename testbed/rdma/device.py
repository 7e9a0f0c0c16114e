"""The soft RoCE "NIC": one UDP socket on port 4791 in this network namespace that receives for every
QP, a QP table, and the progress loop that moves datagrams between the sockets and the queue pairs.

Each QP sends from its own UDP source port, derived from its QP number as rdma_rxe does
(:func:`testbed.rdma.wire.qp_source_port`, 0xC000..0xFFFF), so ECMP hashing spreads QPs over paths
while each QP stays one flow; QPs whose ports collide share a socket. Where that port is taken (two
devices in one namespace, as in the unit tests) the kernel picks one, and ``qp.path`` records it.

The kernel adds IP and UDP; the datagram is BTH .. ICRC. Sockets are unconnected with path-MTU
discovery on, so IPv4 packets leave with DF set and IP ID 0, which the ICRC covers (see
:mod:`testbed.rdma.wire`). The sockets' own TOS is the common case, data at the default traffic class
(DSCP 26, ECT(0): :data:`wire.DATA_TOS`); a datagram of another class (ACKs and NAKs Not-ECT, CNPs at DSCP
48, a QP with its own ``dscp``) carries its TOS as ancillary data, so a PFC fabric sees RoCE on its lossless
priority and CNPs on theirs, as from a ConnectX NIC. ``IP_RECVTOS`` hands the received ECN bits to the QPs,
so CE marks drive DCQCN's notification point::

    progress(): recv (non-blocking, up to a batch) -> ICRC + source check -> qp.on_datagram
                timers -> qp.pump (window, DCQCN pacing) -> sendmsg(parts) (scatter, no copy)
                nothing to do -> select() until the next deadline (never a fixed sleep)

Single-threaded on purpose: the application thread drives the "NIC" (as rdma_rxe's tasklets do), so
there are no locks and no GIL ping-pong on the data path.
"""

from __future__ import annotations

import errno
import ipaddress
import random
import select
import socket
import struct
import time
from typing import Callable

from testbed.errors import SpecError
from testbed.rdma import wire
from testbed.rdma.qp import QpConfig, QueuePair, Remote
from testbed.rdma.verbs import CompletionQueue, ProtectionDomain, RdmaError
from testbed.roce.opcodes import ROCE_UDP_PORT

IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)
IP_PMTUDISC_DO = getattr(socket, "IP_PMTUDISC_DO", 2)
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
IPV6_RECVTCLASS = getattr(socket, "IPV6_RECVTCLASS", 66)
IPV6_TCLASS = getattr(socket, "IPV6_TCLASS", 67)


def source_ip_for(peer: str) -> str:
    """The local address the kernel would use to reach ``peer`` (a UDP 'connect' sends nothing)."""
    family = socket.AF_INET6 if ipaddress.ip_address(peer).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((peer, 9))
        return s.getsockname()[0]


_RCVBUF, _SNDBUF = (33, socket.SO_RCVBUF), (32, socket.SO_SNDBUF)   # (SO_*BUFFORCE, SO_*BUF)


def _set_buffers(sock: socket.socket, size: int) -> None:
    """Large socket buffers, so a receiver descheduled for a few ms on a busy machine loses nothing.

    ``net.core.rmem_max`` caps SO_RCVBUF (about 200 KB by default, ~90 datagrams of 1 KB); root may go
    past it with the FORCE variants.
    """
    for force, plain in (_RCVBUF, _SNDBUF):
        _set_buffer(sock, force, plain, size)


def _set_buffer(sock: socket.socket, force: int, plain: int, size: int) -> None:
    """One socket buffer's size, past ``net.core.*mem_max`` where root may (the FORCE option)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, force, size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, plain, size)


class Device:
    """A soft RoCEv2 port bound to ``ip``:``port`` (port 0 picks a free one, for tests)."""

    def __init__(self, ip: str, port: int = ROCE_UDP_PORT, seed: int | None = None, rx_limit_pps: float | None = None,
                 nic_pfc: dict | None = None, rx_buffer_bytes: int | None = None):
        """``rx_limit_pps``: the host takes at most this many datagrams a second off the receive queue (a slow
        receiver: PCIe, memory or CPU behind the NIC); ``rx_buffer_bytes``: that queue's size (the NIC's
        receive buffer; the kernel doubles it and counts each datagram's true size) instead of the
        default 4 MB; ``nic_pfc``: the NIC sends PAUSE when the queue passes xoff
        (:class:`testbed.rdma.rxpause.RxPause`'s fields; root, for its AF_PACKET socket)."""
        if rx_limit_pps is not None and not rx_limit_pps > 0:
            raise SpecError("rx_limit_pps", f"must be a positive rate, got {rx_limit_pps!r}")
        if rx_buffer_bytes is not None and not (isinstance(rx_buffer_bytes, int) and rx_buffer_bytes >= 4096):
            raise SpecError("rx_buffer_bytes", f"must be an integer >= 4096, got {rx_buffer_bytes!r}")
        addr = ipaddress.ip_address(ip)
        self.ipv6 = addr.version == 6
        self.ip = str(addr)
        family = socket.AF_INET6 if self.ipv6 else socket.AF_INET
        self._family = family
        self.sock = self._socket(port)
        if rx_buffer_bytes is not None:
            _set_buffer(self.sock, *_RCVBUF, rx_buffer_bytes)
        self.port = self.sock.getsockname()[1]
        self._tx: dict[int, socket.socket] = {}   # wanted source port -> socket
        self._rng = random.Random(seed)
        self.qps: dict[int, QueuePair] = {}
        self._rxbuf = bytearray(65536)
        self._rxview = memoryview(self._rxbuf)
        self._blocked: set = set()
        self.stats = {"rx": 0, "rx_malformed": 0, "rx_icrc_bad": 0, "rx_unknown_qp": 0, "tx_enobufs": 0}
        self._rx_limit = rx_limit_pps
        self._rx_tokens, self._rx_refill = 1.0, time.monotonic()
        self.pauser = None
        if nic_pfc:
            from testbed.rdma.rxpause import NicPauser, RxPause

            self.pauser = NicPauser(self.ip, RxPause(**nic_pfc))

    def _socket(self, port: int, required: bool = True) -> socket.socket:
        sock = socket.socket(self._family, socket.SOCK_DGRAM)
        try:
            if self.ipv6:
                sock.setsockopt(socket.IPPROTO_IPV6, IPV6_TCLASS, wire.DATA_TOS)
                sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVTCLASS, 1)
            else:
                sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, wire.DATA_TOS)
                sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
            _set_buffers(sock, 4 << 20)
            try:
                sock.bind((self.ip, port))
            except OSError as exc:
                if required or exc.errno != errno.EADDRINUSE:
                    raise
                sock.bind((self.ip, 0))
        except OSError as exc:
            sock.close()
            raise RdmaError(f"cannot open RoCE port {self.ip}:{port}: {exc.strerror}") from exc
        sock.setblocking(False)
        return sock

    def _tx_socket(self, qpn: int) -> socket.socket:
        want = wire.qp_source_port(qpn)
        sock = self._tx.get(want)
        if sock is None:
            sock = self._tx[want] = self._socket(want, required=False)
        return sock

    def close(self) -> None:
        for sock in self._tx.values():
            sock.close()
        self._tx.clear()
        self.sock.close()
        if self.pauser is not None:
            self.pauser.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- objects ----------------------------------------------------------------------------------
    def alloc_pd(self, seed: int | None = None) -> ProtectionDomain:
        return ProtectionDomain(seed if seed is not None else self._rng.getrandbits(32))

    def create_qp(self, pd: ProtectionDomain, cq: CompletionQueue, config: QpConfig | None = None,
                  recv_cq: CompletionQueue | None = None, transport: str = "rc",
                  qkey: int = 0x11111111, psn: int = 0, qpn: int | None = None) -> QueuePair:
        """A new QP; a UD QP is ready at once (``psn`` its first PSN), RC/UC wait for :meth:`connect`.

        ``qpn`` asks for a number (a control plane that preloads switches' QP maps must know it); default random.
        """
        if qpn is not None and (isinstance(qpn, bool) or not isinstance(qpn, int) or not 2 <= qpn < 1 << 24
                                or qpn in self.qps):
            raise SpecError("qpn", f"must be a free QP number 2..{(1 << 24) - 1}, got {qpn!r}")
        while qpn is None:
            qpn = self._rng.randrange(2, 1 << 24)
            if qpn in self.qps:
                qpn = None
        sock = self._tx_socket(qpn)
        qp = QueuePair(qpn, pd, cq, config or QpConfig(), self._sender(qpn, sock), recv_cq, transport, qkey)
        qp.sport = sock.getsockname()[1]
        self.qps[qpn] = qp
        if transport == "ud":
            qp.ready_ud(self.ip, qp.sport, self.port, psn, time.monotonic())
        return qp

    def connect(self, qp: QueuePair, remote: Remote, my_psn: int) -> None:
        path = wire.Path(self.ip, qp.sport, remote.ip, remote.port, rx_port=self.port)
        qp.connect(remote, path, my_psn, time.monotonic())

    def destroy_qp(self, qp: QueuePair) -> None:
        self.qps.pop(qp.qpn, None)

    def _sender(self, qpn: int, sock: socket.socket) -> Callable[..., bool]:
        level, opt = (socket.IPPROTO_IPV6, IPV6_TCLASS) if self.ipv6 else (socket.IPPROTO_IP, socket.IP_TOS)
        anc = {wire.DATA_TOS: ()}   # TOS -> the ancillary data that sets it on one datagram

        def out(parts: list, tos: int, dest: tuple | None = None) -> bool:
            if dest is None:
                path = self.qps[qpn].path
                dest = (path.remote_ip, path.remote_port)
            cmsg = anc.get(tos)
            if cmsg is None:
                cmsg = anc[tos] = [(level, opt, struct.pack("i", tos))]
            try:
                sock.sendmsg(parts, cmsg, 0, dest)
            except BlockingIOError:
                self._blocked.add(sock)
                return False
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self.stats["tx_enobufs"] += 1
                    return True  # dropped by the stack: the same as loss on the path
                if exc.errno == errno.EMSGSIZE:
                    raise RdmaError(f"datagram of {sum(len(p) for p in parts)} B exceeds the path MTU; "
                                    "use a smaller --mtu") from exc
                raise
            return True

        return out

    # -- progress ---------------------------------------------------------------------------------
    def progress(self, timeout: float = 0.0, budget: int = 32) -> int:
        """One round of receive, timers and transmit; waits up to ``timeout`` when there was nothing."""
        now = time.monotonic()
        allowed = self._rx_allowance(now)
        did = self._drain(now, allowed) if allowed else 0
        if self._rx_limit is not None:
            self._rx_tokens -= did
        if self.pauser is not None:
            self.pauser.check(self.sock, now)
        for qp in self.qps.values():
            qp.on_timer(now)
            did += qp.pump(now, budget)
        if did or timeout <= 0:
            return did
        deadlines = [d for d in (qp.next_deadline() for qp in self.qps.values()) if d is not None]
        readers = [self.sock]
        if self._rx_limit is not None and self._rx_tokens < 1:   # the host is busy: wake for its next datagram
            readers = []
            deadlines.append(now + (1 - self._rx_tokens) / self._rx_limit)
        if self.pauser is not None and self.pauser.state.paused:   # refresh the PAUSE, or see the buffer drain
            deadlines.append(now + self.pauser.state.refresh_s / 4)
        wait = min([timeout] + [max(0.0, d - now) for d in deadlines])
        writers = list(self._blocked)
        self._blocked = set()
        select.select(readers, writers, [], wait)
        return 0

    def receive_stats(self) -> dict:
        """The counters plus the receive side's: datagrams the kernel dropped at the port's socket (its queue
        full: a host that did not keep up) and, with ``nic_pfc``, the PAUSE the NIC sent."""
        from testbed.rdma.rxpause import socket_drops

        out = dict(self.stats, rx_socket_drops=socket_drops(self.sock))
        if self.pauser is not None:
            out["nic_pfc"] = self.pauser.state.counters(time.monotonic())
        return out

    def _rx_allowance(self, now: float) -> int:
        """Datagrams the host may take off the receive queue now (256 a round without a limit)."""
        if self._rx_limit is None:
            return 256
        self._rx_tokens = min(8.0, self._rx_tokens + (now - self._rx_refill) * self._rx_limit)
        self._rx_refill = now
        return min(256, int(self._rx_tokens))

    def run_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Drive progress until ``done()``; raises TimeoutError naming ``what``."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
            self.progress(timeout=0.01)

    def _drain(self, now: float, limit: int) -> int:
        sock, buf, view, qps = self.sock, self._rxbuf, self._rxview, self.qps
        level, tos_opt = (socket.IPPROTO_IPV6, IPV6_TCLASS) if self.ipv6 else (socket.IPPROTO_IP, socket.IP_TOS)
        got = 0
        for _ in range(limit):
            try:
                n, anc, _flags, addr = sock.recvmsg_into((buf,), 64)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                continue  # e.g. an ICMP error queued on the socket
            got += 1
            self.stats["rx"] += 1
            ce = False
            for lvl, typ, data in anc:
                if lvl == level and typ == tos_opt and data:
                    ce = (data[0] if not self.ipv6 else int.from_bytes(data[:4], "little")) & 3 == 3
            if n < 16:
                self.stats["rx_malformed"] += 1
                continue
            qp = qps.get(int.from_bytes(buf[5:8], "big"))
            if qp is not None and qp.transport == "ud" and qp.state.value == "rts":
                path = qp.ud_path(addr[0], addr[1])
            else:
                path = qp.path if qp is not None else None
            if path is None:
                self.stats["rx_unknown_qp"] += 1
                continue
            if addr[0] != path.remote_ip or not path.rx_icrc_ok(view, n, addr[1]):
                self.stats["rx_icrc_bad"] += 1
                continue
            try:
                qp.on_datagram(view, n, ce, now)
            except (ValueError, IndexError, struct.error) as exc:  # passed the ICRC but lies inside
                self.stats["rx_malformed"] += 1
                qp.stats.malformed_rx += 1
                del exc
        return got
