"""Allreduce runs on a BMv2 replica (root glue): in-network (workers + switch + PS) and the host ring.

    AggTestbed(workers=8, topology="leaf", link_rate_bps=2e6, out_dir=...)    context manager
      .run_switch([JobRun(1, "int32", 262144, loss=0.01), JobRun(2, ...)])  -> [RunResult per job]
      .run_ring(JobRun(1, "int32", 262144))                                 -> RunResult

    leaf:        h0..h(n-1) workers, h(n) parameter server, all on one BMv2 switch (the aggregator)
    leaf-spine:  two BMv2 leaves with n/2 workers each (+ the PS on leaf 2) under one BMv2 spine, which
                 aggregates; leaves forward contributions up and fan results out (result_fanout);
                 uplinks are non-blocking (n/2 + 1 line rates)

Every host's link is shaped with tc HTB to ``link_rate_bps`` (a real 100G link under time dilation),
chosen so that links, not BMv2's packet rate, bound the run. Workers run as processes on the hosts
(``python -m testbed.agg.worker`` / ``testbed.agg.ring``), start at one wall-clock instant and write
reports; results are checked here against numpy. Bytes per link come from the switch-side interface
counters (wire bytes, headers included).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from testbed.agg import quant
from testbed.agg.program import STATS_COUNTER, AggJob, AggPlan
from testbed.agg.protocol import ELEMS, FRAME_BYTES, Stat
from testbed.agg.tensors import expected_sum, make_tensor
from testbed.console import console
from testbed.dilation import Dilation
from testbed.errors import EmulationError, SpecError
from testbed.poll import poll

AGG_IP = "10.255.0.1"
AGG_MAC = "02:ff:00:00:00:01"
REAL_RATE_BPS = 100e9
TOPOLOGIES = ("leaf", "leaf-spine")
REGISTERS_TO_RESET = ("AggIngress.slots.bitmap", "AggIngress.slots.contributions")


@dataclass(frozen=True)
class JobRun:
    job: int
    dtype: str
    elements: int
    loss: float = 0.0
    seed: int = 1


@dataclass
class RunResult:
    mode: str                   # switch | ring
    job: int
    workers: int
    dtype: str
    elements: int
    loss: float
    time_s: float
    correct: bool
    exact: bool
    max_abs_error: float
    bytes_per_worker_link: dict      # {"up": mean bytes host->switch, "down": switch->host}
    retransmits: int = 0
    injected_drops: int = 0
    start_spread_s: float = 0.0      # latest minus earliest worker start (should be ~0)
    wrong: int | None = None         # int32: elements differing from numpy's sum, over every worker's result
    rtt_median_s: float | None = None
    switch_stats: dict = field(default_factory=dict)


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def count_wrong(results: list, want: np.ndarray) -> int:
    """Elements of every worker's result that differ from ``want`` (nccl-tests' #wrong: summed over ranks);
    a result of the wrong length counts every element it should have had."""
    return sum(int(np.count_nonzero(np.asarray(r) != want)) if np.shape(r) == want.shape else int(want.size)
               for r in results)


def fabric(workers: int, topology: str):
    """The replica graph: (G, aggregator switch, worker hosts in rank order, PS host)."""
    from testbed.topo.addressing import assign
    from testbed.topo.builder import set_link
    from testbed.topo.generators import big_switch, spine_leaf

    if topology not in TOPOLOGIES:
        raise SpecError("topology", f"{topology!r} is not one of: {', '.join(TOPOLOGIES)}")
    if not 2 <= workers <= 32:
        raise SpecError("workers", f"must be in 2..32, got {workers!r}")
    if topology == "leaf":
        G = assign(big_switch(workers + 1))
        hs = [n for n in G if G.nodes[n]["role"] == "host"]
        agg = next(n for n in G if G.nodes[n]["role"] != "host")
        wk, ps = hs[:workers], hs[workers]
    else:
        if workers % 2:
            raise SpecError("workers", f"leaf-spine needs an even number of workers, got {workers}")
        G = assign(spine_leaf(2, 1, workers // 2 + 1))
        agg = next(n for n in G if G.nodes[n]["role"] == "spine")
        leaves = [n for n in G if G.nodes[n]["role"] == "leaf"]
        under = [[h for h in G.neighbors(leaf) if G.nodes[h]["role"] == "host"] for leaf in leaves]
        wk = under[0][: workers // 2] + under[1][: workers // 2]
        ps = under[1][workers // 2]
    for n in G:
        if G.nodes[n]["role"] != "host":
            G.nodes[n]["p4"] = "aggregation"
    # host links at the real line rate; leaf uplinks non-blocking (as many line rates as the leaf has
    # hosts), as in AI fabrics: the leaves forward every contribution up to the aggregating spine
    for u, v in G.edges():
        hosts_below = [sum(G.nodes[x]["role"] == "host" for x in G.neighbors(s)) for s in (u, v)
                       if G.nodes[s]["role"] == "leaf"]
        both_switches = G.nodes[u]["role"] != "host" and G.nodes[v]["role"] != "host"
        set_link(G, u, v, rate_bps=REAL_RATE_BPS * (max(hosts_below) if both_switches and hosts_below else 1))
    return G, agg, wk, ps


class AggTestbed:
    """One replica for many runs (start-up is the slow part); see the module docstring."""

    def __init__(self, workers: int, topology: str = "leaf", link_rate_bps: float = 2e6, out_dir=None,
                 window: int = 32, jobs: int = 2, ps_slots: int = 0, name: str = "agg"):
        self.G, self.aggregator, self.workers, self.ps = fabric(workers, topology)
        self.n = workers
        self.topology = topology
        self.link_rate_bps = link_rate_bps
        self.dilation = Dilation(REAL_RATE_BPS / link_rate_bps)
        self.out_dir = Path(out_dir or tempfile.mkdtemp(prefix="testbed-agg-"))
        self.window = window
        # job 1 and job 2 (when asked for) share the switch; job 2 leaves ps_slots of its window to the PS
        self.jobs = [AggJob(j, tuple(self.workers), window=window,
                            switch_slots=window - ps_slots if j == 2 else None,
                            ps=self.ps if (j == 2 and ps_slots) else None) for j in range(1, jobs + 1)]
        self.plan = AggPlan(self.G, self.aggregator, AGG_IP, self.jobs)
        self.rep = None
        # initial (and least) retransmission timeout: a window queued at both ends of a link, plus slack;
        # the workers adapt it to the round trips they measure
        self.timeout = 2 * window * FRAME_BYTES * 8 / link_rate_bps + 0.02

    # ----------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> "AggTestbed":
        from testbed.doctor import plan_capabilities
        from testbed.emu import Replica
        from testbed.p4rt.mininet_switch import plan_switch_factory
        from testbed.plan import Overrides, plan_replica

        # rates only: the workers' protocol is timed by the links' rates; cable delays are not its subject
        plan = plan_replica(self.G, plan_capabilities(), Overrides(scale=self.dilation.scale, links="rates",
                                                                   frame_bytes=FRAME_BYTES))
        console.print(f"agg: starting {self.topology} replica, {self.n} workers, links "
                      f"{self.link_rate_bps / 1e6:g} Mbit/s (dilation {self.dilation.scale:g})")
        self.rep = Replica(plan, out_dir=self.out_dir, name="agg",
                           switch_factory=plan_switch_factory(plan, log_dir=self.out_dir)).__enter__()
        try:
            for sw in self.plan.switches():
                prog = self.plan.switch_program(sw)
                with self.rep.switch(sw).client() as c:
                    c.apply(prog.entries)
                    for g, ports in prog.mc_groups.items():
                        c.mc_group(g, ports)
            for h in self.workers + [self.ps]:
                node = self.rep.host(h)
                intf = node.defaultIntf().name
                out = node.cmd(f"ip neigh replace {AGG_IP} lladdr {AGG_MAC} dev {intf} nud permanent; echo rc=$?")
                if "rc=0" not in out:
                    raise EmulationError(f"cannot add the aggregator's neighbour entry on {h}: {out.strip()}")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.rep is not None:
            self.rep.__exit__(None, None, None)
            self.rep = None

    # ----------------------------------------------------------------------------- measurement
    def _link_bytes(self) -> dict:
        """{host: (bytes host->switch, bytes switch->host)} from the switch-side interfaces."""
        out = {}
        for h in self.workers + [self.ps]:
            sw = next(iter(self.G.neighbors(h)))
            intf = self.rep.intf_name(sw, h)
            stats = Path("/sys/class/net") / intf / "statistics"
            out[h] = (int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text()))
        return out

    def _stats(self) -> dict:
        with self.rep.switch(self.aggregator).client() as c:
            return {s.name.lower(): c.counter_read(STATS_COUNTER, int(s)).packets for s in Stat}

    def _reset_slots(self) -> None:
        with self.rep.switch(self.aggregator).client() as c:
            for r in REGISTERS_TO_RESET:
                c.register_reset(r)
            c.counter_reset(STATS_COUNTER)

    def _start_processes(self, argvs: list[tuple], deadline_s: float) -> None:
        """Start (host, argv, log) processes and wait until all exited 0 (kill the rest on failure)."""
        procs = [(host, argv, self.rep.popen(host, argv, stdout=open(log, "w"), stderr=-2), log)
                 for host, argv, log in argvs]

        def settled():   # poll() treats exceptions as "not yet", so a failure is returned, not raised
            failed = [(host, argv, p, log) for host, argv, p, log in procs if p.poll() not in (None, 0)]
            return failed or all(p.poll() == 0 for _, _, p, _ in procs)

        try:
            outcome = poll(settled, timeout=deadline_s, interval=0.1, what="workers to finish")
        except TimeoutError:
            outcome = None
        if outcome is not True:
            for _, _, p, _ in procs:
                if p.poll() is None:
                    p.kill()
            if outcome is None:
                raise EmulationError(f"workers did not finish within {deadline_s:g}s; logs in {self.out_dir}")
            host, argv, p, log = outcome[0]
            raise EmulationError(f"{host}: `{' '.join(argv[1:3])} ...` exited {p.returncode}; see {log}")

    def _check(self, mode, jr: JobRun, work: Path, before, after, reports, stats=None) -> RunResult:
        got = np.load(work / f"{mode}-{jr.job}-0.npy")
        digests = {r["digest"] for r in reports}
        want = expected_sum(jr.seed, jr.job, self.n, jr.elements, jr.dtype)
        wrong = None
        if jr.dtype == "int32":
            wrong = count_wrong([np.load(work / f"{mode}-{jr.job}-{r}.npy") for r in range(self.n)], want)
            exact = bool(np.array_equal(got, want))
            err = float(np.max(np.abs(got.astype(np.int64) - want.astype(np.int64)))) if got.size else 0.0
            correct = exact
        else:
            err = float(np.max(np.abs(got.astype(np.float64) - want)))
            exact = False
            if mode == "switch":
                ts = [make_tensor(jr.seed, jr.job, r, jr.elements, "float32") for r in range(self.n)]
                correct = bool(np.all(np.abs(got.astype(np.float64) - want) <= quant.tensor_error_bound(ts, ELEMS)))
            else:
                correct = bool(np.allclose(got, want, rtol=1e-5, atol=1e-6 * float(np.max(np.abs(want)))))
        correct = correct and len(digests) == 1
        up = np.mean([after[h][0] - before[h][0] for h in self.workers])
        down = np.mean([after[h][1] - before[h][1] for h in self.workers])
        return RunResult(mode=mode, job=jr.job, workers=self.n, dtype=jr.dtype, elements=jr.elements,
                         loss=jr.loss, time_s=max(r["end"] for r in reports) - min(r["start"] for r in reports),
                         correct=correct, exact=exact, max_abs_error=err,
                         bytes_per_worker_link={"up": float(up), "down": float(down)},
                         retransmits=sum(r.get("retransmits", 0) for r in reports),
                         injected_drops=sum(r.get("dropped_injected", 0) for r in reports),
                         rtt_median_s=_median(r.get("rtt_median_s") for r in reports),
                         start_spread_s=max(r["start"] for r in reports) - min(r["start"] for r in reports),
                         switch_stats=stats or {}, wrong=wrong)

    def _start_at(self, processes: int) -> float:
        return time.time() + 1.0 + 0.2 * processes      # python start-up of every process, contended

    def run_switch(self, runs: list[JobRun], deadline_s: float = 600.0) -> list[RunResult]:
        """Concurrent in-network allreduces, one per job in ``runs``."""
        known = {j.job for j in self.jobs}
        for jr in runs:
            if jr.job not in known:
                raise SpecError("job", f"job {jr.job} is not programmed (jobs: {sorted(known)})")
        self._reset_slots()
        work = Path(tempfile.mkdtemp(prefix="agg-", dir=self.out_dir))
        start_at = self._start_at(len(runs) * self.n + 1)
        stop = work / "stop"
        argvs = []
        for jr in runs:
            for rank, h in enumerate(self.workers):
                argv = [sys.executable, "-m", "testbed.agg.worker", "--job", str(jr.job), "--rank", str(rank),
                        "--workers", str(self.n), "--agg-ip", AGG_IP, "--elements", str(jr.elements),
                        "--dtype", jr.dtype, "--seed", str(jr.seed), "--window", str(self.window),
                        "--timeout", f"{self.timeout:.4f}", "--loss", str(jr.loss), "--start-at", str(start_at),
                        "--report", str(work / f"switch-{jr.job}-{rank}.json"),
                        "--save", str(work / f"switch-{jr.job}-{rank}.npy")]
                argvs.append((h, argv, work / f"switch-{jr.job}-{rank}.log"))
        ps_jobs = ",".join(f"{j.job}:{self.n}" for j in self.jobs if j.ps is not None)
        ps = None
        if ps_jobs:
            ps = self.rep.popen(self.ps, [sys.executable, "-m", "testbed.agg.ps", "--jobs", ps_jobs,
                                          "--stop-file", str(stop)], stdout=open(work / "ps.log", "w"), stderr=-2)
        before = self._link_bytes()
        try:
            self._start_processes(argvs, deadline_s)
        finally:
            stop.touch()
            if ps is not None:
                poll(lambda: ps.poll() is not None, timeout=10, what="parameter server to stop")
        after = self._link_bytes()
        stats = self._stats()
        results = []
        for jr in runs:
            reports = [json.loads((work / f"switch-{jr.job}-{r}.json").read_text()) for r in range(self.n)]
            results.append(self._check("switch", jr, work, before, after, reports, stats))
        shutil.rmtree(work, ignore_errors=True)
        return results

    def run_ring(self, jr: JobRun, deadline_s: float = 600.0) -> RunResult:
        work = Path(tempfile.mkdtemp(prefix="ring-", dir=self.out_dir))
        peers = ",".join(self.rep.ip(h) for h in self.workers)
        start_at = self._start_at(self.n)
        argvs = []
        for rank, h in enumerate(self.workers):
            argv = [sys.executable, "-m", "testbed.agg.ring", "--job", str(jr.job), "--rank", str(rank),
                    "--peers", peers, "--elements", str(jr.elements), "--dtype", jr.dtype, "--seed", str(jr.seed),
                    "--start-at", str(start_at), "--report", str(work / f"ring-{jr.job}-{rank}.json"),
                    "--save", str(work / f"ring-{jr.job}-{rank}.npy")]
            argvs.append((h, argv, work / f"ring-{jr.job}-{rank}.log"))
        before = self._link_bytes()
        self._start_processes(argvs, deadline_s)
        after = self._link_bytes()
        reports = [json.loads((work / f"ring-{jr.job}-{r}.json").read_text()) for r in range(self.n)]
        result = self._check("ring", jr, work, before, after, reports)
        shutil.rmtree(work, ignore_errors=True)
        return result
