"""Runtime impairment of a link node (testbed.links.control) and ``testbed fail gray``'s pure parts."""

from __future__ import annotations

import random

import pytest

from testbed.commands.fail import gray_rates, gray_target, link_nodes_in_runs, plan_folders
from testbed.errors import UsageError
from testbed.links.control import acknowledged, control_path, parse_control, render_control, seq_of
from testbed.links.model import LinkParams, LossModel
from testbed.links.queue import Direction


def test_render_parse_round_trip():
    text = render_control(7, {"a>b": 0.1, "b>a": 0.0})
    assert text == "seq 7\nloss a>b random,0.1\nloss b>a none\n"
    assert parse_control(text) == (7, {"a>b": 0.1, "b>a": 0.0})
    assert parse_control("seq 3\nloss both random,0.25\n") == (3, {"a>b": 0.25, "b>a": 0.25})


@pytest.mark.parametrize("rates", [{"a>c": 0.1}, {"a>b": 1.5}, {"b>a": -0.1}])
def test_render_refuses_bad_input(rates):
    with pytest.raises(ValueError):
        render_control(1, rates)


@pytest.mark.parametrize("text", ["loss a>b random,0.1\n", "seq 2\nloss a>b random,2\n", "seq 2\nloss x>y none\n",
                                  "seq 2\nloss a>b ge,0.1\n", "seq 2\nrate 10\n"])
def test_parse_refuses_what_the_c_core_refuses(text):
    with pytest.raises(ValueError):
        parse_control(text)


def test_seq_is_known_even_when_refused():
    assert seq_of("seq 9\nloss a>b random,7\n") == 9 and seq_of("loss a>b none\n") == 0
    assert acknowledged({"control_seq": 9}, 9) and not acknowledged({"control_seq": 8}, 9)
    assert not acknowledged(None, 1)
    assert str(control_path("/x/dl1-delayline.json")) == "/x/dl1-delayline.json.ctl"


def test_direction_set_loss_keeps_counters_and_attributes_every_drop():
    d = Direction(LinkParams(), random.Random(1))
    frame = bytes(64)
    for i in range(1000):
        d.admit(i * 1e-3, frame)
    assert d.counters["drop_loss"] == 0 and d.snapshot()["loss_rate_now"] == 0.0
    d.set_loss(LossModel(rate=0.2))
    lost = sum(d.admit(1 + i * 1e-3, frame)[0] is None for i in range(5000))
    assert d.counters["drop_loss"] == lost and 850 < lost < 1150   # 0.2 x 5000, +- 5 sd
    assert d.counters["rx_packets"] == 6000 and d.snapshot()["loss_rate_now"] == 0.2
    d.set_loss(None)
    assert all(d.admit(10 + i * 1e-3, frame)[0] is not None for i in range(1000))
    assert d.counters["drop_loss"] == lost


DOCS = [
    {"run_id": "r1", "alive": True, "objects": [
        {"kind": "process", "pid": 11, "start": 5.0,
         "argv": ["/b/p4/linkcore-abc", "forward", "--a", "dl3-eth1", "--b", "dl3-eth2", "--stats", "/res/dl3-delayline.json"]},
        {"kind": "process", "pid": 12, "start": 6.0,
         "argv": ["/v/python", "-m", "controllers.fabric", "--graph", "/res/graph.json", "--of-port", "6653"]},
        {"kind": "link", "name": "dl3-eth1"}]},
    {"run_id": "r0", "alive": False, "objects": [
        {"kind": "process", "pid": 9, "argv": ["/v/python", "-m", "testbed.links.delayline", "--a", "dl1-eth1",
                                               "--b", "dl1-eth2", "--stats", "/old/dl1-delayline.json"]}]},
]
PLAN = {"links": [{"u": "l1", "v": "s1", "via": "dl3", "backend": "userspace", "reason": "delay"},
                  {"u": "l1", "v": "s2", "via": None, "backend": "htb", "reason": "rate only"}]}


def test_link_nodes_of_live_runs_only():
    nodes = link_nodes_in_runs(DOCS)
    assert nodes == [{"run_id": "r1", "pid": 11, "start": 5.0, "node": "dl3", "stats": "/res/dl3-delayline.json",
                      "core": "c"}]
    assert [str(f) for f in plan_folders(DOCS, nodes)] == ["/res"]


def test_gray_target_and_its_errors():
    from pathlib import Path

    nodes = link_nodes_in_runs(DOCS)
    plans = {Path("/res"): PLAN}
    t = gray_target(nodes, plans, "s1", "l1")
    assert (t["node"], t["u"], t["v"], t["pid"]) == ("dl3", "l1", "s1", 11)
    assert gray_rates(t, "s1", 0.1, one_way=True) == {"b>a": 0.1}
    assert gray_rates(t, "l1", 0.1, one_way=True) == {"a>b": 0.1}
    assert gray_rates(t, "l1", 0.1, one_way=False) == {"a>b": 0.1, "b>a": 0.1}
    with pytest.raises(UsageError, match="not by a userspace link node.*delay or loss"):
        gray_target(nodes, plans, "l1", "s2")
    with pytest.raises(UsageError, match=r"no link l9 - s1 .*l1 - s1 \(dl3\)"):
        gray_target(nodes, plans, "l9", "s1")
