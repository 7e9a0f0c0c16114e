"""The userspace delay line between two namespaces: delay, rate, loss, RED/ECN (issue 6's must-shows).

    netns A [10.77.0.1] --veth-- delay line --veth-- [10.77.0.2] netns B

One namespace pair per link core (the compiled core, the default, and the Python reference line); each
test restarts the delay line with its own parameters.
Figures are checked with tolerances on ratios, never on wall-clock durations.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from testbed.emu.registry import RunRegistry
from testbed.links.model import LinkParams, LossModel, RedParams
from testbed.links.probe import summarise
from testbed.links.wire import open_wire
from testbed.poll import poll

pytestmark = [pytest.mark.root]


@pytest.fixture(scope="module", params=["c", "python"])
def wire(request, tmp_path_factory):
    # unique names (lk<pid>...): no clash with other runs, so no need to queue for the machine-wide lock
    with RunRegistry("link-tests", exclusive=False) as run:
        w = open_wire(run, tmp_path_factory.mktemp("links"), tag=request.param[0], core=request.param)
        yield w
        w.stop()


def test_50ms_one_way_delay_by_ping(wire):
    wire.restart(LinkParams(delay_s=0.050), seed=1)
    out = subprocess.run(wire.exec_argv("a", ["ping", "-c", "10", "-i", "0.2", "-q", wire.ip_b]),
                         capture_output=True, text=True, check=True).stdout
    avg_rtt_ms = float(re.search(r"= [\d.]+/([\d.]+)/", out).group(1))
    assert avg_rtt_ms / 2 == pytest.approx(50.0, rel=0.05), out
    stats = wire.stop()
    assert stats["core"] == wire.default_core  # the core asked for ran (no silent fallback)
    assert stats["directions"]["a>b"]["tx_packets"] >= 10 and stats["rx_kernel_drops"] == 0


def test_100mbit_rate_by_iperf3(wire):
    wire.restart(LinkParams(rate_bps=100e6, delay_s=0.001, limit=200), seed=2)
    server = wire.run.spawn(wire.exec_argv("b", ["iperf3", "-s", "-1", "-p", "5301"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    poll(lambda: subprocess.run(wire.exec_argv("b", ["ss", "-Hltn", "sport = :5301"]), capture_output=True,
                                text=True).stdout.strip(), timeout=10, what="iperf3 server to listen")
    out = subprocess.run(wire.exec_argv("a", ["iperf3", "-c", wire.ip_b, "-p", "5301", "-t", "4", "-O", "1", "-J"]),
                         capture_output=True, text=True, timeout=60)
    server.wait(timeout=10)
    assert out.returncode == 0, out.stdout[-500:] + out.stderr[-500:]
    received_bps = json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]
    assert received_bps == pytest.approx(100e6, rel=0.10)


def test_bench_gap_case_accounts_for_every_frame_at_200mbit(wire):
    """`testbed bench link`'s gap case offers 1.2x the rate from the compiled core's generator (in groups) and
    follows every frame: offered by the source = received by the line = dropped at its tail + sent by it, and
    sent = captured at B. So a gap made before or after the line (a stalled sender, a capture that missed
    frames) shows in the case instead of passing for the line's. The median gap is the serialisation time."""
    from testbed.bench.link import _gap_case

    case = _gap_case(wire, 200e6, {"gap_seconds": 1.0}, wire.default_core)
    f = case["frames"]
    assert case["source"] == "linkcore-gen"
    assert f["offered"] >= 0.95 * 1.2 * 200e6 / (1514 * 8), case   # the source kept (nearly) its pace
    assert f["line_rx"] == f["offered"], case
    assert f["line_rx"] == f["line_dropped"] + f["line_tx"] and f["line_dropped"] > 0, case  # 1.2x: a backlog
    assert f["captured"] == f["line_tx"], case
    assert abs(case["median_gap_us"] - case["ideal_gap_us"]) <= 0.02 * case["ideal_gap_us"], case


def test_one_percent_loss_over_20k_packets(wire):
    wire.restart(LinkParams(loss=LossModel(rate=0.01)), seed=3)
    sent, result = wire.probe(count=20_000, pps=8000, size=64)
    stats = wire.stop()
    s = summarise(result, sent["sent"])
    assert s["loss"] == pytest.approx(0.01, abs=0.003)
    # every loss is the link's, none is the machine's
    assert s["lost"] == stats["directions"]["a>b"]["drop_loss"] and stats["rx_kernel_drops"] == 0


@pytest.mark.parametrize("tos", [0x02, 0x00], ids=["ect", "not-ect"])
def test_flow_above_bottleneck_ect_marked_non_ect_dropped(wire, tos):
    red = RedParams(kmin=5, kmax=30, pmax=0.2, unit="packets")
    wire.restart(LinkParams(rate_bps=10e6, delay_s=0.002, limit=100, red=red), seed=4)
    sent, result = wire.probe(count=2000, pps=1700, size=1472, tos=tos)  # 2x the 10 Mbit/s bottleneck
    d = wire.stop()["directions"]["a>b"]
    s = summarise(result, sent["sent"])
    if tos:
        assert s["ce"] > 0 and d["ce_marked"] == s["ce"] and d["drop_red"] == 0
    else:
        assert s["ce"] == 0 and d["ce_marked"] == 0 and d["drop_red"] > 0
        assert s["lost"] >= d["drop_red"]
