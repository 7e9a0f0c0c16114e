"""Exactly-n-bytes reads from a stream socket: the one loop behind every fixed-size exchange (the
soft-RDMA side channels, the ring allreduce's segments). ``recv`` may return any part of what was sent,
so each of those reads loops; this is that loop, once, without quadratic copying for large reads."""

from __future__ import annotations

import socket


class ShortRead(EOFError):
    """The peer closed the connection after ``got`` of the ``wanted`` bytes."""

    def __init__(self, got: int, wanted: int):
        super().__init__(f"connection closed after {got} of {wanted} bytes")
        self.got, self.wanted = got, wanted


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock`` (its timeout applies to each ``recv``).

    Raises:
        ShortRead: the peer closed first.
        TimeoutError: ``sock`` has a timeout and it expired.
    """
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ShortRead(got, n)
        got += k
    return bytes(buf)
