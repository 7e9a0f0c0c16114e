"""recv_exact: every byte of a read that arrives in pieces, the count when the peer closes early, and
the side-channel wrapper's one-line errors (no root)."""

from __future__ import annotations

import socket
import threading

import pytest

from testbed.rdma.oob import read_exact
from testbed.rdma.verbs import RdmaError
from testbed.sockio import ShortRead, recv_exact


def _dribble(sock, data, piece):
    for i in range(0, len(data), piece):
        sock.sendall(data[i:i + piece])


def test_a_read_in_many_pieces_is_whole_and_in_order():
    a, b = socket.socketpair()
    data = bytes(range(256)) * 4000  # ~1 MB, sent 997 bytes at a time
    t = threading.Thread(target=_dribble, args=(a, data, 997))
    t.start()
    got = recv_exact(b, len(data))
    t.join()
    assert got == data
    a.sendall(b"next")
    assert recv_exact(b, 4) == b"next"  # nothing of the next message was consumed


def test_peer_closing_early_says_how_much_came():
    a, b = socket.socketpair()
    a.sendall(b"x" * 10)
    a.close()
    with pytest.raises(ShortRead) as err:
        recv_exact(b, 26)
    assert (err.value.got, err.value.wanted) == (10, 26)


def test_side_channel_errors_name_what_and_whom():
    a, b = socket.socketpair()
    a.sendall(b"0000")
    a.close()
    with pytest.raises(RdmaError, match=r"server closed the connection before sending its QP info \(4/8 B\)"):
        read_exact(b, 8, "its QP info", peer="server")
    c, d = socket.socketpair()
    with pytest.raises(RdmaError, match=r"no its QP info from the server within 0.05 s"):
        read_exact(d, 8, "its QP info", timeout=0.05, peer="server")
