"""tc argv builders (kernel backend) and the backend choice, without root."""

import pytest

from testbed.errors import SpecError
from testbed.links import tc
from testbed.links.model import LinkParams, LossModel, RedParams


def test_rate_only_is_htb():
    cmds = tc.htb_cmds("s1-eth1", 100e6)
    assert cmds[0] == ["tc", "qdisc", "replace", "dev", "s1-eth1", "root", "handle", "5:", "htb", "default", "1"]
    assert cmds[1][:9] == ["tc", "class", "replace", "dev", "s1-eth1", "parent", "5:", "classid", "5:1"]
    assert cmds[1][cmds[1].index("rate") + 1] == "100000000bit" == cmds[1][cmds[1].index("ceil") + 1]
    # ~1 ms at the rate, at least two full frames: 100 Mbit/s -> 12500 bytes
    assert cmds[1][cmds[1].index("burst") + 1] == "12500" == cmds[1][cmds[1].index("cburst") + 1]
    assert [c[2:4] for c in tc.link_cmds("x", LinkParams(rate_bps=100e6))] == [["replace", "dev"]] * 2
    limited = tc.htb_cmds("x", 1e6, limit=64)
    assert limited[2] == ["tc", "qdisc", "replace", "dev", "x", "parent", "5:1", "handle", "6:", "pfifo", "limit", "64"]
    assert tc.htb_cmds("x", 1e6, limit=30000, limit_unit="bytes")[2][-3:] == ["bfifo", "limit", "30000"]


def test_netns_prefix():
    assert tc.htb_cmds("e0", 1e6, netns="lkA")[0][:5] == ["ip", "netns", "exec", "lkA", "tc"]


def test_full_link_is_netem_then_tbf_then_red():
    p = LinkParams(rate_bps=10e6, delay_s=0.05, jitter_s=0.001, loss=LossModel(rate=0.01), limit=100,
                   red=RedParams(kmin=20, kmax=60, pmax=0.2, unit="packets"))
    netem, tbf, red = tc.link_cmds("d0", p)
    # netem's limit is the queue's: it counts tbf's queue too, and tail-drops before RED can drop a marked frame
    assert netem == ["tc", "qdisc", "replace", "dev", "d0", "root", "handle", "10:", "netem",
                     "delay", "50000us", "1000us", "loss", "random", "1%", "limit", "100"]
    assert tbf[tbf.index("parent") + 1] == "10:1" and "tbf" in tbf
    assert tbf[tbf.index("rate") + 1] == "10000000bit" and tbf[tbf.index("limit") + 1] == str(100 * 1514)
    assert red[red.index("parent") + 1] == "20:1"
    assert red[red.index("min") + 1] == str(20 * 1514) and red[red.index("max") + 1] == str(60 * 1514)
    # the kernel marks 2q/(1+q) of the frames at probability q (uniform spacing): q = 0.2/1.8 marks 0.2
    q = float(red[red.index("probability") + 1])
    assert q == pytest.approx(0.2 / 1.8, rel=1e-5) and 2 * q / (1 + q) == pytest.approx(0.2, rel=1e-5)
    assert red[-1] == "ecn"


def test_serialise_is_netem_rate_alone_unless_red_needs_tbf():
    """Store and forward: netem's own rate (a frame leaves when its last bit has), no tbf; with RED on the
    end tbf keeps the queue (netem's cannot mark) and nothing changes."""
    p = LinkParams(rate_bps=10e6, delay_s=0.01, limit=64)
    (netem,) = tc.link_cmds("d0", p, serialise=True)
    assert netem[netem.index("netem"):] == ["netem", "delay", "10000us", "rate", "10000000bit",
                                            "limit", str(64 + 9)]   # 10 ms at 10 Mbit/s: 8.3 full frames
    assert len(tc.link_cmds("d0", p)) == 2   # without it: netem, then tbf
    red = LinkParams(rate_bps=10e6, delay_s=0.01, red=RedParams(kmin=20, kmax=60, pmax=0.2, unit="packets"))
    assert not tc.serialises(red) and tc.link_cmds("d0", red, serialise=True) == tc.link_cmds("d0", red)
    assert tc.in_flight_packets(LinkParams(delay_s=0.01)) == 0


def test_gemodel_loss_and_byte_limit():
    p = LinkParams(delay_s=0.001, loss=LossModel(kind="gilbert-elliott", p=0.01, r=0.25), limit=15140,
                   limit_unit="bytes")
    (netem,) = tc.link_cmds("d0", p)
    assert netem[netem.index("loss"):] == ["loss", "gemodel", "1%", "25%", "100%", "0%", "limit", "10"]


def test_red_without_ecn_and_without_rate():
    red = RedParams(kmin=30000, kmax=90000, pmax=1.0, ecn=False)
    cmd = tc.red_cmd("d0", red, 1e6, 150000, parent="20:1")
    assert "ecn" not in cmd and cmd[cmd.index("burst") + 1] == "33"
    assert cmd[cmd.index("probability") + 1] == "1"   # a step to 1 stays a step to 1
    with pytest.raises(SpecError) as err:
        tc.link_cmds("d0", LinkParams(delay_s=0.01, red=red))
    assert err.value.field == "link.red"


def test_rate_below_tc_minimum_is_rejected():
    with pytest.raises(SpecError, match="8 kbit/s"):
        tc.htb_cmds("d0", 1000)
