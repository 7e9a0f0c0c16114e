"""The connection-data records of ibv_rc_pingpong and perftest, against byte strings built from the tools'
own source text (format strings and buffer sizes copied verbatim, cited by file and line), not from the
code under test.

Sources read:
  rdma-core  691953d8d502f54088f776c5ba2aeed0a5ac945d  libibverbs/examples/rc_pingpong.c, pingpong.c
  perftest   00b55b6660d0170dabe2c1b49193e8fbe265086e  src/perftest_communication.h
"""

from __future__ import annotations

import struct

import pytest

from testbed.rdma.interop import (
    PerftestDest,
    PingpongDest,
    format_perftest,
    format_pingpong,
    gid_of_ip,
    ip_of_gid,
    parse_perftest,
    parse_pingpong,
)
from testbed.rdma.verbs import RdmaError

# rc_pingpong.c:171  char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"];
PP_MSG_LITERAL = "0000:000000:000000:00000000000000000000000000000000"
# rc_pingpong.c:207  sprintf(msg, "%04x:%06x:%06x:%s", my_dest->lid, my_dest->qpn, my_dest->psn, gid);
PP_FMT = "%04x:%06x:%06x:%s"
# rc_pingpong.c:215  write(sockfd, "done", sizeof "done")
PP_DONE = b"done" + b"\x00"
# perftest_communication.h:80  #define KEY_MSG_SIZE_GID     (108)   and :79  #define KEY_MSG_SIZE (59)
KEY_MSG_SIZE_GID, KEY_MSG_SIZE = 108, 59
# perftest_communication.h:89  #define KEY_PRINT_FMT_GID
KEY_PRINT_FMT_GID = ("%04x:%04x:%06x:%06x:%08x:%016llx:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:"
                     "%02x:%02x:%02x:%02x:%02x:%02x:%08x:")
# perftest_communication.h:86  #define KEY_PRINT_FMT
KEY_PRINT_FMT = "%04x:%04x:%06x:%06x:%08x:%016llx:%08x"

GID = bytes.fromhex("00000000000000000000ffff0a4d0302")   # ::ffff:10.77.3.2


def _c(fmt: str, *args) -> bytes:
    """sprintf with C's length modifiers dropped (Python ints are wide enough)."""
    return (fmt.replace("%016llx", "%016x") % args).encode()


def _gid_to_wire_gid(gid: bytes) -> str:
    """pingpong.c:72-80: memcpy into uint32_t[4] (host order, x86 little-endian), then
    sprintf(&wgid[i * 8], "%08x", htobe32(tmp_gid[i]))."""
    words = struct.unpack("<4I", gid)
    return "".join("%08x" % struct.unpack(">I", struct.pack("<I", w))[0] for w in words)


def test_pingpong_record_matches_the_c_formatting():
    dest = PingpongDest(lid=0, qpn=0x0011AB, psn=0xC0FFEE, gid=GID)
    want = _c(PP_FMT, 0, 0x11AB, 0xC0FFEE, _gid_to_wire_gid(GID))
    assert len(PP_MSG_LITERAL) + 1 == 52
    assert format_pingpong(dest) == want + b"\x00" * (len(PP_MSG_LITERAL) + 1 - len(want))
    assert parse_pingpong(format_pingpong(dest)) == dest
    assert dest.ip == "10.77.3.2"


def test_pingpong_parses_the_sizeof_literal_and_a_record_from_a_real_run_shape():
    zero = parse_pingpong(PP_MSG_LITERAL.encode() + b"\x00")
    assert zero == PingpongDest(0, 0, 0, bytes(16))
    # what rc_pingpong prints and sends on rxe over IPv4: LID 0, the IPv4-mapped GID
    msg = b"0000:000011:4c1d2e:00000000000000000000ffff0a4d0301\x00"
    d = parse_pingpong(msg)
    assert (d.lid, d.qpn, d.psn, d.ip) == (0, 0x11, 0x4C1D2E, "10.77.3.1")
    assert PP_DONE == b"done\x00"


@pytest.mark.parametrize("bad", [b"x" * 52, b"0000:11:22\x00".ljust(52, b"\x00"), b"short"])
def test_pingpong_junk_is_refused(bad):
    with pytest.raises(RdmaError):
        parse_pingpong(bad)


def test_perftest_record_with_gid_matches_the_c_formatting():
    dest = PerftestDest(lid=0, out_reads=16, qpn=0x00A1B2, psn=0x123456, rkey=0x8AB3C4D5,
                        vaddr=0x7F12_3456_7000, gid=GID, srqn=0)
    want = _c(KEY_PRINT_FMT_GID, 0, 16, 0xA1B2, 0x123456, 0x8AB3C4D5, 0x7F1234567000, *GID, 0)
    assert len(want) == KEY_MSG_SIZE_GID - 1   # the format fills the record but its NUL
    assert format_perftest(dest) == want + b"\x00"
    assert parse_perftest(want + b"\x00") == dest
    assert parse_perftest(want + b"\x00").ip == "10.77.3.2"


def test_perftest_record_without_gid():
    dest = PerftestDest(1, 0, 0x42, 0x99, 0x1234, 0xDEAD_BEEF, None, 0)
    want = _c(KEY_PRINT_FMT, 1, 0, 0x42, 0x99, 0x1234, 0xDEADBEEF, 0)
    assert len(want) == KEY_MSG_SIZE - 1
    assert format_perftest(dest) == want + b"\x00" and parse_perftest(want + b"\x00") == dest
    with pytest.raises(RdmaError, match="no GID"):
        _ = dest.ip


def test_perftest_junk_is_refused():
    with pytest.raises(RdmaError):
        parse_perftest(b"z" * KEY_MSG_SIZE_GID)
    with pytest.raises(RdmaError):
        parse_perftest(b"0000:0000" + b"\x00" * 50)


def test_gids_of_addresses():
    assert gid_of_ip("10.77.3.2") == GID and ip_of_gid(GID) == "10.77.3.2"
    assert ip_of_gid(gid_of_ip("fd00::2")) == "fd00::2"


@pytest.mark.parametrize("transport,size", [("rc", 5000), ("uc", 5000), ("ud", 1000)])
def test_pingpong_client_and_server_over_loopback(transport, size):
    """Both halves of the ibv_{rc,uc,ud}_pingpong protocol (TCP records, then SEND ping-pong), byte-exact;
    UD with the GRH room in front of every payload."""
    from testbed.rdma.pingpong import pingpong_client, report_text, serve_pingpong
    from tests.unit.loopback import free_udp, serve_in_thread

    p_server, p_client = free_udp(), free_udp()
    box, t = serve_in_thread(serve_pingpong, "127.0.0.1", 0, size=size, iters=50, rx_depth=20, roce_port=p_server,
                             peer_roce_port=p_client, chk=True, transport=transport)
    r = pingpong_client("127.0.0.1", box["port"], size=size, iters=50, rx_depth=20, chk=True,
                        roce_port=p_client, peer_roce_port=p_server, transport=transport)
    t.join(30)
    assert r["verified"] and box["server"]["verified"] and r["bytes"] == 2 * size * 50
    assert r["transport"] == box["server"]["transport"] == transport
    assert r["remote"]["qpn"] == box["server"]["local"]["qpn"] and r["remote"]["ip"] == "127.0.0.1"
    assert "usec/iter" in report_text(r) and "GID ::ffff:127.0.0.1" in report_text(r)


def test_ud_pingpong_refuses_a_message_larger_than_the_mtu(capsys):
    from testbed.cli import main

    assert main(["rdma", "ud-pingpong", "127.0.0.1", "-s", "2048"]) == 2
    err = capsys.readouterr().err
    assert "--size" in err and "MTU (1024)" in err and "Traceback" not in err
