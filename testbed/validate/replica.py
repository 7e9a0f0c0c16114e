"""The replica side of ``testbed validate`` (root glue): run the experiments, return raw measurements.

All of it happens on one emulated wire (the link engineer's fixture, :mod:`testbed.links.wire`), the same
path ``tests/integration/test_rdma_fairness.py`` builds, with the delay line as the marking switch::

    ns A  10.77.0.1 QP1 ---\\                                       /--- 10.77.0.2 server 1   ns B
          10.77.0.3 QP2 ----> delay line: rate, delay, RED/ECN  <---- 10.77.0.4 server 2
                          (queue-depth series, counters, lateness)

* :func:`run_dcqcn`: N soft-RDMA write-bw senders with DCQCN, staggered starts; their rate series and the
  bottleneck's queue series on one monotonic clock.
* :func:`run_goodput`: one sender without DCQCN, window- or rate-limited.
* :func:`run_link`: Mininet-HiFi checks through :mod:`testbed.bench.link`'s cases (delay, RED) and its
  backlog source (:mod:`testbed.bench.gap_source`) for the delivered-rate and gap captures.

Each run's delay line is seeded with the ``seed`` its caller derives from the run's seed
(``testbed validate --seed``, :func:`testbed.seeds.derive`) and returns it as ``link_seed``: repetitions
draw different RED marks, and a recorded seed replays them.

Everything is created inside the caller's :class:`~testbed.emu.registry.RunRegistry`; nothing here
decides pass or fail (that is :mod:`testbed.validate.rows`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.emu import ops
from testbed.errors import EmulationError
from testbed.links.model import LinkParams, RedParams
from testbed.links.wire import MAC_A, MAC_B, Wire, open_wire

CLI = [sys.executable, "-m", "testbed.cli"]
#: extra address pairs for more than one QP (10.77.0.1/.2 are the wire's own)
PAIRS = (("10.77.0.1", "10.77.0.2"), ("10.77.0.3", "10.77.0.4"), ("10.77.0.5", "10.77.0.6"),
         ("10.77.0.7", "10.77.0.8"))
#: soft-RDMA frame on the wire for a 1024-byte IB MTU: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4
FRAME_BYTES = 14 + 20 + 8 + 12 + 1024 + 4

SENDER = r"""
import json, sys, time
from testbed.dilation import Dilation
from testbed.rdma.dcqcn import DcqcnParams
from testbed.rdma.perf import run_client
from testbed.rdma.qp import QpConfig
c = json.loads(sys.argv[1])
d = Dilation(c["scale"])
dcqcn = DcqcnParams(line_rate=c["line_rate"]).dilated(d) if c["dcqcn"] else None
qp = QpConfig(mtu=1024, window=c["window"], timeout=d.time(c["timeout_s"]), dcqcn=dcqcn)
wait = c["start_at"] - time.monotonic()
if wait > 0:
    time.sleep(wait)  # noqa: TID251 - the experiment's staggered start, not a wait for state
offset = time.time() - time.monotonic()
r = run_client(c["host"], "write_bw", c["size"], duration=c["duration"], config=qp, series_every=c["every"],
               connect_wait=20, source=c["bind"])
r["wall_minus_monotonic"] = offset
print(json.dumps(r))
"""


@dataclass(frozen=True)
class DcqcnRun:
    """One DCQCN experiment, real-world figures (dilated here).

    Attributes:
        line_rate_bps, bottleneck_bps, one_way_s: the real fabric: NIC rate, bottleneck rate, propagation.
        kmin_pkts, kmax_pkts, pmax, limit_pkts: the bottleneck's RED curve and tail-drop limit.
        starts_s, duration_s: real-world start of each flow and length of the run.
        scale: time dilation.
    """

    line_rate_bps: float = 1e9
    bottleneck_bps: float = 500e6
    one_way_s: float = 100e-6
    kmin_pkts: int = 5
    kmax_pkts: int = 40
    pmax: float = 0.2
    limit_pkts: int = 400
    starts_s: tuple = (0.0, 0.05)
    duration_s: float = 0.4
    scale: float = 20.0
    window: int = 256
    series_every_s: float = 25e-6

    def link(self) -> LinkParams:
        """The emulated bottleneck."""
        red = RedParams(kmin=self.kmin_pkts, kmax=self.kmax_pkts, pmax=self.pmax, unit="packets", ecn=True)
        return LinkParams(rate_bps=self.bottleneck_bps / self.scale, delay_s=self.one_way_s * self.scale,
                          limit=self.limit_pkts, red=red)


def add_pairs(wire: Wire, count: int) -> list[tuple[str, str]]:
    """Give hosts A and B one more address each per extra QP (the wire has the first pair)."""
    for src, dst in PAIRS[1:count]:
        for ns, intf, ip, peer, mac in ((wire.ns_a, wire.if_a, src, dst, MAC_B), (wire.ns_b, wire.if_b, dst, src, MAC_A)):
            ops.run(ops.in_netns(["ip", "addr", "replace", f"{ip}/24", "dev", intf], ns), what=f"address {ip}")
            ops.run(ops.in_netns(["ip", "neigh", "replace", peer, "lladdr", mac, "dev", intf, "nud", "permanent"], ns),
                    what=f"neighbour {peer}")
    return list(PAIRS[:count])


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent.parent)}


def _senders(wire: Wire, workdir: Path, configs: list[dict], timeout: float) -> list[dict]:
    """Servers on B, one sender per config on A; returns the senders' result documents."""
    for c in configs:
        wire.run.spawn(CLI + ["rdma", "server", "--once", "--bind", c["host"]], netns=wire.ns_b,
                       log=workdir / f"server-{c['host']}.log", env=_env())
    procs = []
    for i, c in enumerate(configs):
        with open(workdir / f"sender{i}.log", "w") as err:
            procs.append(wire.run.spawn([sys.executable, "-c", SENDER, json.dumps(c)], netns=wire.ns_a,
                                        stdout=subprocess.PIPE, stderr=err, text=True, env=_env()))
    outs = []
    for i, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise EmulationError(f"sender {i} did not finish in {timeout:g} s; see {workdir}/sender{i}.log") from None
        if p.returncode != 0 or not out.strip():
            raise EmulationError(f"sender {i} failed (status {p.returncode}); see {workdir}/sender{i}.log")
        outs.append(json.loads(out))
    return outs


def run_dcqcn(wire: Wire, workdir: Path, run: DcqcnRun, core: str | None = None, *, seed: int) -> dict:
    """N DCQCN senders through the marking bottleneck; raw series on the monotonic clock (emulated seconds).

    Returns:
        ``{"senders": [result docs with series], "queue_series": [[t, pkts, bytes], ...], "t0": monotonic start
        of the first flow, "link_stats": delay-line counters, "link_seed": the delay line's seed, ...}``.
    """
    pairs = add_pairs(wire, len(run.starts_s))
    wire.restart(run.link(), seed=seed, core=core)
    start = time.monotonic() + 1.5   # leaves the senders time to connect before the first flow starts
    configs = [{"host": dst, "bind": src, "size": 256 * 1024, "scale": run.scale, "line_rate": run.line_rate_bps,
                "dcqcn": True, "window": run.window, "timeout_s": 0.25 / run.scale,
                "start_at": start + s * run.scale, "duration": (run.duration_s - s) * run.scale,
                "every": run.series_every_s * run.scale}
               for (src, dst), s in zip(pairs, run.starts_s, strict=True)]
    results = _senders(wire, workdir, configs, timeout=run.duration_s * run.scale + 120)
    stats = wire.stop()
    direction = stats.get("directions", {}).get("a>b", {})
    return {"senders": results, "queue_series": direction.get("queue_series", []), "t0": start, "link_seed": seed,
            "link_stats": {k: v for k, v in direction.items() if k != "queue_series"},
            "realtime": stats.get("realtime"), "rx_kernel_drops": stats.get("rx_kernel_drops")}


def _ack_timeout(rate_bps: float, one_way_s: float, window: int) -> float:
    """Four times the worst RTT a window can see (propagation plus a whole window queued at the bottleneck):
    a shorter ACK timeout fires while the data is still queued and go-back-N refills the queue."""
    return 4 * (2 * one_way_s + window * FRAME_BYTES * 8 / rate_bps)


def run_goodput(wire: Wire, workdir: Path, rate_bps: float, one_way_s: float, window: int, seconds: float,
                core: str | None = None, *, seed: int) -> dict:
    """One sender, no DCQCN, through a rate-limited, delayed link (emulated figures); its result document."""
    wire.restart(LinkParams(rate_bps=rate_bps, delay_s=one_way_s, limit=max(1000, 4 * window)), seed=seed, core=core)
    c = {"host": wire.ip_b, "bind": wire.ip_a, "size": 64 * 1024, "scale": 1.0, "line_rate": rate_bps,
         "dcqcn": False, "window": window, "timeout_s": _ack_timeout(rate_bps, one_way_s, window), "start_at": 0.0,
         "duration": seconds, "every": 0.01}
    result = _senders(wire, workdir, [c], timeout=seconds + 120)[0]
    stats = wire.stop()
    result.pop("series", None)
    result["link_stats"] = stats.get("directions", {}).get("a>b", {})
    result["link_stats"].pop("queue_series", None)
    result["link_seed"] = seed
    return result


def open_validation_wire(reg, workdir: Path) -> Wire:
    """The wire every replica row runs on, inside ``reg``."""
    return open_wire(reg, workdir, tag="v")


def run_link(wire: Wire, quick: bool, gap_rates_bps, core: str, *, gap_seeds, red_seed: int) -> dict:
    """The link checks of ``testbed bench link``: its delay and RED cases as it runs them (the RED case with
    ``red_seed``, so each validate run draws its own marks), and one backlogged capture per rate, kept whole
    for the CCDF, with its seed of ``gap_seeds``.

    The captures come from the bench's own source, :func:`testbed.bench.gap_source.offer_backlog`
    (``linkcore gen`` offering 1.2x the rate in groups of 32), not from an iperf3 client of our own: at
    200 Mbit/s iperf3 delivered 89-93 % of the rate, so the queue ran dry and the 200 Mbit/s rows measured
    iperf3's sending. Both rows that read a capture use that source: the gap CCDF, and the delivered rate,
    whose reference is min(rate, offered) (a link cannot send what it was not given; at 1.2x that is the
    rate). iperf3 could not show that assumption held, ``gen`` counts what it sent, so each capture records
    ``offered_bps`` and the row states it and scores against the minimum. No iperf3 server runs here (the
    source starts its own one-client server only when the compiled core did not build).
    """
    from testbed.bench import link as bench
    from testbed.bench.gap_source import frame_ledger, offer_backlog

    plan = bench.cases(quick)
    delays = [bench._delay_case(wire, d, plan, core) for d in plan["delays_s"]]
    gaps = []
    for rate, seed in zip(gap_rates_bps, gap_seeds, strict=True):
        wire.restart(LinkParams(rate_bps=rate, delay_s=0.001, limit=200), seed=seed, core=core)
        backlog = offer_backlog(wire, rate, plan["gap_seconds"], f"gaps{rate / 1e6:g}M", frame=bench.FRAME)
        stats = wire.stop()
        ledger = frame_ledger(backlog.offered, stats.get("directions", {}).get("a>b", {}), len(backlog.arrivals_ns))
        gaps.append({"rate_bps": rate, "link_seed": seed, "arrivals_ns": backlog.arrivals_ns,
                     "source": backlog.source, "offered_bps": backlog.offered_bps(bench.FRAME), "frames": ledger,
                     **bench._late(stats)})
    red = bench._red_case(wire, plan, core, seed=red_seed)
    return {"delay_cases": delays, "gap_captures": gaps, "red": red, "frame": bench.FRAME}
