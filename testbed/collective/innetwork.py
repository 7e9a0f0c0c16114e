"""In-network allreduce as an algorithm of ``testbed collective`` (``--algorithm innetwork``), through the
aggregation switch of :mod:`testbed.agg` (SwitchML/ATP-style ``p4/aggregation.p4`` on BMv2).

    --fabric agg-leaf | agg-leaf-spine     testbed.agg.runner.fabric(ranks, "leaf" | "leaf-spine"):
                                           the only fabrics with an aggregation switch
    refuse(...)        pure: a fabric without one, or another collective/algorithm on one -> one SpecError
    link_rate(ranks)   pure: the default emulated host-link rate (the agg spec's switch budget / ranks)
    result(...)        pure: the runs' RunResults -> the nccl-tests rows and the document
                       ``experiment.print_report`` / ``summary`` / ``plot`` take, as for ring and tree
    run(opts, dir)     root: AggTestbed.run_switch per size and iteration (one way to aggregate: testbed/agg)

Why separate fabrics: the collective's fabrics (``small``, ``fat-tree-k4``, ``rail-small``) are Open vSwitch;
the aggregation program runs on BMv2 switches that also forward the workers' traffic, and its workers speak
the aggregation packet over UDP, not the soft-RDMA QPs. The rows are the same: ``time`` is the latest
worker's end less the latest worker's start (as for the ranks), ``busbw = algbw x 2(n-1)/n`` (nccl-tests'
allreduce factor, although each worker link carries ~1x the size each way, not 2(n-1)/n: so busbw can
exceed the link rate; ``bytes_per_link_over_size`` says what crossed the links), ``#wrong`` every
worker's int32 result against numpy's sum, element by element.
"""

from __future__ import annotations

import statistics

from testbed.collective import metrics
from testbed.errors import SpecError

ALGORITHM = "innetwork"
#: ``--fabric`` name -> testbed.agg.runner topology
FABRICS = {"agg-leaf": "leaf", "agg-leaf-spine": "leaf-spine"}
#: ``testbed collective run`` options that have no meaning on an aggregation fabric, with the reason
NOT_HERE = {
    "jobs": ("--jobs", lambda v: v != 1, "one job per run: the aggregation fabric's workers are its ranks"),
    "pods": ("--pods", bool, "the aggregation fabrics have no pods"),
    "placement": ("--placement", lambda v: str(v) != "packed",
                  "the aggregation fabric's workers are its hosts h0..h(n-1) in rank order (no placement)"),
    "nic_rate": ("--nic-rate", bool, "every worker link runs at --link-rate on the aggregation fabrics"),
    "trace": ("--trace", bool, "a trace replays host schedules (ring/tree) on small, fat-tree-k4 or rail-small"),
    "failures": ("--failures", bool, "the aggregation switch (BMv2) has no failover path: a failed link "
                                     "stalls the job"),
    "ovs_send_buffer": ("--ovs-send-buffer", lambda v: v is not None,
                        "the aggregation fabrics have no Open vSwitch"),
}


def refuse(fabric: str, collective: str, algorithm: str | None, ovs_fabrics) -> bool:
    """True when the run is in-network; a run that mixes an aggregation fabric with another algorithm,
    or asks for ``innetwork`` where there is no aggregation switch, is refused (one line: the field, the fix)."""
    agg = " or ".join(FABRICS)
    if fabric in FABRICS:
        if collective != "allreduce":
            raise SpecError("--collective", f"fabric {fabric} runs allreduce --algorithm {ALGORITHM} only (BMv2 "
                                            f"with p4/aggregation.p4); {collective} runs on {', '.join(ovs_fabrics)}")
        if algorithm not in (None, ALGORITHM):
            raise SpecError("--algorithm", f"fabric {fabric} runs allreduce --algorithm {ALGORITHM} only (BMv2 "
                                           f"with p4/aggregation.p4); {algorithm} runs on {', '.join(ovs_fabrics)}")
        return True
    if algorithm == ALGORITHM:
        if collective != "allreduce":
            raise SpecError("--algorithm", f"{ALGORITHM} is an allreduce algorithm, not one of {collective}")
        raise SpecError("--fabric", f"--algorithm {ALGORITHM} needs an aggregation switch and fabric {fabric} has "
                                    f"none (Open vSwitch); use --fabric {agg} (BMv2 running p4/aggregation.p4)")
    return False


def check_options(a) -> None:
    """Options that mean nothing on an aggregation fabric, and the ranks it can hold (``testbed.agg.runner``'s rule)."""
    for attr, (flag, given, why) in NOT_HERE.items():
        if given(getattr(a, attr, None)):
            raise SpecError(flag, f"does not apply to --fabric {a.fabric}: {why}")
    from testbed.agg.runner import fabric

    try:
        fabric(a.ranks, FABRICS[a.fabric])
    except SpecError as exc:
        raise SpecError("--ranks", f"{exc.message} (fabric {a.fabric})") from None


def _spec():
    import yaml

    from testbed.agg.matrix import SPEC_NAME, load_spec
    from testbed.scenario import REPO_ROOT

    return load_spec(yaml.safe_load((REPO_ROOT / "scenarios" / "specs" / SPEC_NAME).read_text()), False)


def link_rate(ranks: int) -> float:
    """Default emulated worker-link rate: all workers together offer the switch the spec's budget (16 Mbit/s:
    4 ranks at 4 Mbit/s), which BMv2 sustains, so links and not the switch bound the run (docs/aggregation.md)."""
    from testbed.agg.matrix import link_rate as per_worker

    return per_worker(_spec(), ranks)


def window() -> int:
    """Slots per job (packets in flight per worker): the spec's, as the innetwork_allreduce scenario runs."""
    return _spec().window


def size_row(n: int, size: int, runs: list, warmup: int, scale: float, link_rate_bps: float) -> dict:
    """One nccl-tests row from the :class:`testbed.agg.runner.RunResult` of every iteration of one size
    (the first ``warmup`` untimed; ``#wrong`` counts them all, as the ranks do)."""
    from testbed.agg.matrix import SATURATION_UTILISATION

    timed = runs[warmup:]
    times = [r.time_s - r.start_spread_s for r in timed]     # latest end - latest start
    up = statistics.fmean(r.bytes_per_worker_link["up"] for r in timed)
    down = statistics.fmean(r.bytes_per_worker_link["down"] for r in timed)
    util = statistics.fmean(max(r.bytes_per_worker_link.values()) * 8 / r.time_s / link_rate_bps for r in timed)
    wrong = sum(r.wrong for r in runs)
    return metrics.row("allreduce", n, size, statistics.fmean(times), scale, wrong, algorithm=ALGORITHM,
                       iterations=len(times), times_s=times, exact=wrong == 0 and all(r.correct for r in runs),
                       bytes_up=up, bytes_down=down, bytes_per_link_over_size=round(max(up, down) / size, 3),
                       link_utilisation=round(util, 3), bmv2_saturated=util < SATURATION_UTILISATION,
                       retransmits=sum(r.retransmits for r in runs),
                       start_spread_max_s=max(r.start_spread_s for r in runs))


def result(fabric: str, hosts: list, aggregator: str, runs: dict, warmup: int, scale: float, link_rate_bps: float,
           cpu: dict, load: list) -> dict:
    """The run's document in the shape ``experiment.print_report``/``summary``/``plot`` read; ``runs``:
    {size: [RunResult per iteration]}. JCT is the sum of every iteration's time (warm-up included): each
    iteration's workers are new processes, and their start-up between iterations is not the job's."""
    from testbed.emu.runhealth import assess

    n = len(hosts)
    rows = [size_row(n, size, rs, warmup, scale, link_rate_bps) for size, rs in runs.items()]
    jct = sum(r.time_s for rs in runs.values() for r in rs)
    last = rows[-1]
    links = sorted(({"link": "worker->switch (mean)", "bytes": last["bytes_up"],
                     "utilisation": round(last["bytes_up"] * 8 / statistics.fmean(last["times_s"]) / link_rate_bps, 4)},
                    {"link": "switch->worker (mean)", "bytes": last["bytes_down"],
                     "utilisation": round(last["bytes_down"] * 8 / statistics.fmean(last["times_s"]) / link_rate_bps,
                                          4)}), key=lambda x: -x["utilisation"])
    reasons = [f"{r['size_bytes']} B: worker links at {r['link_utilisation']:.0%} of their rate (BMv2 the limit)"
               for r in rows if r["bmv2_saturated"]]
    block = assess(cpu=cpu, reasons=reasons)
    job = {"name": "job1", "hosts": list(hosts), "ranks": n, "jct_s": jct, "real_jct_ms": jct / scale * 1e3,
           "rows": rows, "aggregator": aggregator, "retransmits": sum(r["retransmits"] for r in rows)}
    return {"jobs": [job], "links": links, "span_s": jct, "scale": scale, "fabric": fabric,
            "link_rate_bps": link_rate_bps, "algorithm": ALGORITHM,
            "placements": {"job1": {"policy": "fixed (workers h0..h(n-1))", "hosts": list(hosts)}},
            "health": {"ok": block["emulator_ok"], "reasons": block["emulator"]["reasons"], "cpu": cpu, "load": load,
                       "switch": "BMv2", "block": block}}


def job_line(j: dict) -> str:
    last = j["rows"][-1]
    return (f"# in-network through {j['aggregator']} (BMv2): each worker link carried {last['bytes_per_link_over_size']:.2f}"
            f"x the size each way (a ring: 2(n-1)/n), busy {last['link_utilisation']:.2f} at {last['size_bytes']} B; "
            f"retransmissions {j['retransmits']}; JCT: the iterations' times summed")


def run(opts, out_dir) -> dict:
    """Build the aggregation replica once, then every size's warm-up and timed iterations through the switch (root)."""
    from testbed.agg.runner import AggTestbed, JobRun
    from testbed.emu.cpustat import load_average
    from testbed.emu.health import CpuWatch, emulator_processes

    runs: dict = {}
    with AggTestbed(opts.ranks, FABRICS[opts.fabric], link_rate_bps=opts.link_rate_bps, out_dir=out_dir / "agg",
                    window=window(), jobs=1) as tb, CpuWatch(emulator_processes(tb.rep)) as cpu:
        for size in opts.sizes:
            runs[size] = [tb.run_switch([JobRun(1, "int32", size // 4, seed=it + 1)], opts.timeout_s)[0]
                          for it in range(opts.warmup + opts.iters)]
        hosts, aggregator, scale = list(tb.workers), tb.aggregator, tb.dilation.scale
    return result(opts.fabric, hosts, aggregator, runs, opts.warmup, scale, opts.link_rate_bps, cpu.summary(),
                  [round(x, 2) for x in load_average()])
