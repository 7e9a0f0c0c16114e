"""testbed.emu.ovssndbuf, the pure parts: the size option, which of ovs-vswitchd's packet sockets is the
send socket, the value Linux doubles, the line a run prints; and the collective commands' option."""

from types import SimpleNamespace

import pytest

from testbed.emu import ovssndbuf as S
from testbed.errors import SpecError

# /proc/PID/net/packet of an ovs-vswitchd serving a replica (shape as on this machine, kernel 6.18): the send
# socket (Proto 0000, Iface 0), three port receive sockets (ETH_P_ALL, bound to ports 41-43), and a
# socket bound to every interface (ETH_P_ALL, Iface 0: not the send socket either)
PACKET = """\
sk               RefCnt Type Proto  Iface R Rmem   User   Inode
000000009604c55d 2      3    0000   0     0 0      0      112509393
000000009b31aa12 3      3    0003   41    1 0      0      112509394
00000000a1b2c3d4 3      3    0003   42    1 0      0      112509395
00000000a1b2c3d5 3      3    0003   43    1 4608   0      112509396
00000000a1b2c3d6 3      3    0003   0     1 0      0      112509397
"""
LINKS = {"0": "/dev/null", "3": "socket:[999]", "7": "pipe:[4242]", "36": "anon_inode:[eventfd]",
         "40": "socket:[112509394]", "41": "socket:[112509395]", "42": "socket:[112509396]",
         "43": "socket:[112509397]", "200": "socket:[112509393]"}


def test_the_size_is_what_so_sndbuf_reads():
    assert S.parse_size_arg("4MiB") == 4 << 20
    assert S.parse_size_arg("1MB") == 1_000_000
    assert S.parse_size_arg(" 256KiB ") == 262144


@pytest.mark.parametrize("bad,word", [("lots", "size"), ("4MiB/s", "size"), ("-4MiB", "size such as"),
                                      ("1.5B", "whole"), ("65537", "even"), ("1KiB", "between"),
                                      ("1GiB", "between"), ("1e400", "finite")])
def test_bad_sizes_name_the_option(bad, word):
    with pytest.raises(SpecError) as exc:
        S.parse_size_arg(bad)
    assert exc.value.field == "--ovs-send-buffer" and word in str(exc.value)


def test_packet_table_reads_protocol_in_hex_and_interface():
    table = S.packet_table(PACKET)
    assert table[112509393] == (0, 0) and table[112509395] == (3, 42) and table[112509397] == (3, 0)
    assert len(table) == 5 and S.packet_table("") == {}


def test_socket_inodes_keep_sockets_only():
    assert S.socket_inodes(LINKS) == {3: 999, 40: 112509394, 41: 112509395, 42: 112509396, 43: 112509397,
                                      200: 112509393}


def test_the_send_socket_is_the_unbound_protocol_0_one():
    table = S.packet_table(PACKET)
    fds = S.socket_inodes(LINKS)
    assert S.send_socket_fd(fds, table, 12323) == (200, 112509393)
    # a socket not in the process's fd table (another process's), or a non-packet socket (fd 3), never
    assert S.send_socket_fd({3: 999, 200: 112509393}, table, 1) == (200, 112509393)


def test_no_send_socket_or_several_are_refused():
    table = S.packet_table(PACKET)
    ports_only = {40: 112509394, 41: 112509395, 43: 112509397}
    with pytest.raises(S.NoSendSocket, match="no send socket yet"):
        S.send_socket_fd(ports_only, table, 12323)
    two = S.packet_table(PACKET + "00000000a1b2c3d7 2      3    0000   0     0 0      0      7\n")
    with pytest.raises(S.NoSendSocket, match=r"2 unbound packet sockets \(fds \[9, 200\]\)"):
        S.send_socket_fd({200: 112509393, 9: 7}, two, 12323)


def test_linux_doubles_the_value_set():
    assert S.force_value(212992) == 106496      # net.core.wmem_default back from the value set
    assert 2 * S.force_value(4 << 20) == 4 << 20


def test_the_line_says_raised_and_restored_or_why_not():
    rec = {"applied": True, "requested": 4 << 20, "before": 212992, "during": 4 << 20, "after": 212992,
           "restored": True}
    assert S.line(rec) == ("ovs-vswitchd's send buffer (one socket, shared by every OVS run on this machine) "
                           "raised from 212,992 B to 4,194,304 B for this run and restored to 212,992 B")
    gone = dict(rec, restored=None, after=None, note="ovs-vswitchd restarted during the run (pid 1, now 2)")
    assert S.line(gone).endswith("; ovs-vswitchd restarted during the run (pid 1, now 2)")
    bad = dict(rec, restored=False, after=4 << 20, note="set 106496 B, read back 4194304 B")
    assert "NOT restored: set 106496 B" in S.line(bad)
    assert S.line({"applied": False, "requested": 1}) == "ovs-vswitchd's send buffer: not applied"


def test_options_carry_the_size_and_default_to_off():
    from testbed.collective import experiment as X

    base = dict(fabric="small", collective="all_to_all", algorithm=None, ranks=4, sizes="64KiB", placement="packed",
                jobs=1, pods=False, chunks=2, iters=1, warmup=0, skew=1.0, root=0, link_rate="10M", trace=None)
    assert X.Options.from_args(SimpleNamespace(**base)).ovs_send_buffer is None
    assert X.Options.from_args(SimpleNamespace(**base, ovs_send_buffer="4MiB")).ovs_send_buffer == 4 << 20


def test_a_replica_without_an_ovs_userspace_switch_is_refused():
    from testbed.collective.runner import check_send_buffer

    def plan(*switches):
        return SimpleNamespace(switches=[SimpleNamespace(kind=k, datapath=d) for k, d in switches])

    check_send_buffer(plan(("ovs", "user"), ("ovs", "user")))
    with pytest.raises(SpecError, match="--ovs-send-buffer: .* switches are ovs kernel"):
        check_send_buffer(plan(("ovs", "kernel")))
    with pytest.raises(SpecError, match="bmv2"):
        check_send_buffer(plan(("bmv2", None)))


def test_bench_and_scenario_summaries_say_what_was_applied():
    from scenarios.collective import send_buffer_summary

    assert send_buffer_summary(None, {}) == "not applied"
    rec = {"applied": True, "before": 212992, "during": 4 << 20, "after": 212992, "restored": True}
    runs = {"sweep": {"health": {"ovs_send_buffer_raised": rec}},
            "trace": {"health": {"ovs_send_buffer_raised": dict(rec, restored=None)}}}
    assert send_buffer_summary(4 << 20, runs) == {"bytes": 4 << 20, "runs": 2, "before": [212992], "restored": False}
    runs["trace"]["health"]["ovs_send_buffer_raised"] = rec
    assert send_buffer_summary(4 << 20, runs)["restored"] is True
