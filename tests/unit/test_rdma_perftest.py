"""perftest's control protocol pieces (testbed/rdma/perftest.py), against the sizes and rules of perftest
6.06's source (src/perftest_communication.c, perftest_resources.h at tag v4.5-0.17). The whole exchange
runs live against ib_write_bw/ib_read_bw/ib_send_bw in tests/vm/guest/test_rxe_interop.py."""

from __future__ import annotations

import socket
import threading

import pytest

from testbed.rdma.interop import PerftestDest, format_perftest
from testbed.rdma.perftest import MAX_VERSION, VERSION, _read_record, region_size, slot_stride, version_ok
from testbed.rdma.verbs import RdmaError

GID = bytes(10) + b"\xff\xff" + bytes([10, 79, 0, 1])


def test_version_is_announced_in_sixteen_bytes_and_old_peers_are_refused():
    assert len(VERSION.encode()) < MAX_VERSION == 16
    assert version_ok("6.06") == 6.06 and version_ok("5.70") == 5.70
    with pytest.raises(RdmaError, match="older than 5.70"):
        version_ok("5.60")
    with pytest.raises(RdmaError, match="not a number"):
        version_ok("x")


def test_inc_and_buff_size_as_perftest_defines_them():
    # INC(size, line) = ceil(size / line) * line if size > line else line; BUFF_SIZE = max(size, cycle)
    assert slot_stride(4096, 64) == 4096 and slot_stride(100, 64) == 128 and slot_stride(8, 64) == 64
    assert region_size(4096, 4096, 64) == 4096
    assert region_size(100, 4096, 64) == 4096
    assert region_size(65536, 4096, 64) == 65536
    assert region_size(65537, 4096, 64) == 65600


@pytest.mark.parametrize("gid", [GID, None], ids=["roce-108B", "ib-59B"])
def test_a_record_is_read_whole_whatever_its_size(gid):
    """The reader tells the 108-byte (GID) record from the 59-byte one by its 53rd byte, and leaves
    the next record untouched on the socket."""
    a, b = socket.socketpair()
    with a, b:
        first = PerftestDest(0, 16, 0x13, 0xABCDEF, 0x414, 0x55F7056B8000, gid, 0)
        second = PerftestDest(0, 16, 0x14, 0x123456, 0x415, 0x1000, gid, 0)
        sender = threading.Thread(target=lambda: a.sendall(format_perftest(first) + format_perftest(second)))
        sender.start()
        assert _read_record(b, 5) == first
        assert _read_record(b, 5) == second
        sender.join()
