"""In-network aggregation (SwitchML/ATP on BMv2) against a host ring allreduce, on the same replica.

    leaf:         h0 .. h(n-1) workers, h(n) parameter server        leaf-spine:      spine (aggregates)
                           \\   |   /                                                 /        \\
                         s0 (BMv2, aggregation.p4)                             leaf 0 (BMv2)  leaf 1 (BMv2)
                                                                                n/2 workers    n/2 workers + PS

    switch mode: every worker streams its tensor in 1 KB packets (256 x int32) to the aggregator's
                 address; the switch sums them in its slot pool and multicasts each result: ~1x the
                 tensor crosses each worker link each way.
    ring mode:   bandwidth-optimal ring over TCP between the same hosts: 2 (n-1)/n x the tensor.

What it shows: completion time, goodput, wire bytes per worker link (both directions), correctness
(int32: bit-exact against numpy; float32: within the documented quantization bound), per workers /
tensor size / loss / concurrent jobs, and the in-network vs ring time and bytes ratios. Links are real
100G links time-dilated so that all workers together offer the switch ``switch_budget`` (spec; 16 Mbit/s:
4 workers get 4 Mbit/s links, 8 get 2 Mbit/s), which BMv2 sustains, so links are the bottleneck;
a row whose links ran below half their rate is flagged ``bmv2_saturated`` (the switch, not the link,
limited it). Loss is injected at the workers' send path (seeded; the ring runs lossless: no
kernel netem here, so speed-ups at loss > 0 are against a lossless ring). Two jobs share the switch in
disjoint slot partitions (ATP-style) and are compared with two rings run back to back.

    sudo testbed run innetwork_allreduce --quick      # leaf, 4 and 8 workers, 1 MB (~2 min)
    sudo testbed run innetwork_allreduce              # spec matrix (scenarios/specs/allreduce.yaml)
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402

from testbed.agg.matrix import SATURATION_UTILISATION, SPEC_NAME, Spec, elements, link_rate, load_spec, trials  # noqa: E402, F401
from testbed.console import console, require_root  # noqa: E402
from testbed.emu.health import CpuWatch, emulator_processes  # noqa: E402
from testbed.emu.runhealth import assess  # noqa: E402
from testbed.errors import SpecError  # noqa: E402
from testbed.scenario import REPO_ROOT, Results, run_main, scenario_parser  # noqa: E402

NAME = "innetwork_allreduce"
#: why ``--failures`` is refused here (a scenario takes a failure schedule or says why not)
NO_FAILURES = (
    "the aggregation switch (BMv2, aggregation.p4) has no failover path, so a failed link stalls the "
    "job; its loss is injected at the workers (the spec matrix's loss)")
SPEC = REPO_ROOT / "scenarios" / "specs" / SPEC_NAME


# -- pure: the result rows -------------------------------------------------------------------------
def summarise(rows: list[dict]) -> dict:
    """speedup_vs_ring / bytes_ratio_vs_ring per switch row (key topo/workers/size/loss/jobs)."""
    ring = {(r["topology"], r["workers"], r["size_mb"]): r for r in rows if r["mode"] == "ring"}
    speed, ratio = {}, {}
    for r in rows:
        base = ring.get((r["topology"], r["workers"], r["size_mb"]))
        if r["mode"] != "switch" or base is None:
            continue
        key = f"{r['topology']}/{r['workers']}w/{r['size_mb']}MB/loss{r['loss_pct']}/jobs{r['jobs']}"
        speed[key] = round(base["time_s"] * r["jobs"] / r["time_s"], 3)
        ratio[key] = round(r["bytes_per_worker_link"] / base["bytes_per_worker_link"], 3)
    return {"speedup_vs_ring": speed, "bytes_ratio_vs_ring": ratio}


def row(topo: str, size_mb: float, loss: float, jobs: int, results: list, link_rate_bps: float) -> dict:
    """One output row from the RunResults of a trial (several for concurrent jobs)."""
    r0 = results[0]
    t = max(r.time_s for r in results)
    tensor = r0.elements * 4
    up = sum(r.bytes_per_worker_link["up"] for r in results[:1])      # link counters cover all jobs
    down = sum(r.bytes_per_worker_link["down"] for r in results[:1])
    per_link = max(up, down) / jobs
    utilisation = max(up, down) * 8 / t / link_rate_bps
    return {"topology": topo, "workers": r0.workers, "size_mb": size_mb, "loss_pct": loss, "jobs": jobs,
            "mode": r0.mode, "time_s": round(t, 4), "exact": all(r.exact for r in results),
            "correct": all(r.correct for r in results), "max_abs_error": max(r.max_abs_error for r in results),
            "bytes_per_worker_link": int(per_link), "bytes_up": int(up), "bytes_down": int(down),
            "bytes_per_link_over_tensor": round(per_link / tensor, 3),
            "goodput_mbps": round(tensor * 8 * jobs / t / 1e6, 3), "link_utilisation": round(utilisation, 3),
            "bmv2_saturated": r0.mode == "switch" and utilisation < SATURATION_UTILISATION,
            "retransmits": sum(r.retransmits for r in results), "injected_drops": sum(r.injected_drops for r in results),
            "rtt_median_s": r0.rtt_median_s, "link_rate_bps": link_rate_bps,
            "dilation": round(100e9 / link_rate_bps, 1), "start_spread_s": round(max(r.start_spread_s for r in results), 4)}


def saturated(rows: list[dict]) -> list[str]:
    """Health reasons of a replica's rows: switch rows whose worker links BMv2 could not fill."""
    return [f"{r['workers']}w {r['size_mb']:g} MB loss {r['loss_pct']:g}% jobs {r['jobs']}: worker links at "
            f"{r['link_utilisation']:.0%} of their rate (BMv2 the limit, < {SATURATION_UTILISATION:.0%})"
            for r in rows if r["bmv2_saturated"]]


# -- output -----------------------------------------------------------------------------------------------
def table(rows: list[dict], summary: dict, to) -> None:
    from rich.table import Table

    t = Table(title="in-network allreduce vs ring")
    for col in ("topo", "n", "MB", "loss%", "jobs", "mode", "time s", "goodput Mb/s", "bytes/link/tensor",
                "util", "ok", "speedup"):
        t.add_column(col, justify="right")
    for r in rows:
        key = f"{r['topology']}/{r['workers']}w/{r['size_mb']}MB/loss{r['loss_pct']}/jobs{r['jobs']}"
        sp = summary["speedup_vs_ring"].get(key)
        t.add_row(r["topology"], str(r["workers"]), f"{r['size_mb']:g}", f"{r['loss_pct']:g}", str(r["jobs"]),
                  r["mode"], f"{r['time_s']:.2f}", f"{r['goodput_mbps']:.2f}", f"{r['bytes_per_link_over_tensor']:.2f}",
                  f"{r['link_utilisation']:.2f}" + (" SAT" if r["bmv2_saturated"] else ""),
                  ("exact" if r["exact"] else "ok") if r["correct"] else "WRONG", f"{sp:.2f}x" if sp else "")
    to.print(t)


def plots(rows: list[dict], summary: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(summary["speedup_vs_ring"])
    if not keys:
        return
    fig, axes = plt.subplots(1, 2, figsize=(max(8, len(keys) * 0.9), 4.5))
    axes[0].bar(range(len(keys)), [summary["speedup_vs_ring"][k] for k in keys], color="tab:blue")
    axes[0].axhline(1.0, color="grey", lw=0.8)
    axes[0].axhline(1.5, color="tab:green", lw=0.8, ls="--", label="goal 1.5x")
    axes[0].set_ylabel("ring time / switch time")
    axes[0].legend()
    axes[1].bar(range(len(keys)), [summary["bytes_ratio_vs_ring"][k] for k in keys], color="tab:orange")
    axes[1].set_ylabel("bytes per worker link: switch / ring")
    for ax in axes:
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels(keys, rotation=60, ha="right", fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "speedup.png", dpi=110)
    plt.close(fig)


# -- the run ------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = scenario_parser(__doc__, prog=f"testbed run {NAME}", refuse_failures=NO_FAILURES)
    parser.add_argument("--spec", default=str(SPEC), help="matrix spec (YAML)")
    args = parser.parse_args(argv)
    require_root(f"testbed run {NAME}")
    from testbed.agg.runner import AggTestbed, JobRun

    try:
        doc = yaml.safe_load(Path(args.spec).read_text())
    except OSError as exc:
        raise SpecError("--spec", f"cannot read {args.spec}: {exc.strerror}") from None
    spec = load_spec(doc, args.quick)
    plan = trials(spec)
    with Results(NAME, args, config={"spec": asdict(spec), "trials": plan}) as res:
        rows, health = [], {}
        t0 = time.monotonic()
        groups = {}
        for t in plan:
            groups.setdefault((t[0], t[1]), []).append(t)
        for (topo, n), group in groups.items():
            need_jobs = max(t[5] for t in group)
            rate = link_rate(spec, n)
            with AggTestbed(n, topo, link_rate_bps=rate, out_dir=res.dir / f"{topo}-{n}",
                            window=spec.window, jobs=need_jobs) as tb, CpuWatch(emulator_processes(tb.rep)) as cpu:
                first = len(rows)
                for _, _, size, mode, loss, jobs in group:
                    console.print(f"[{time.monotonic() - t0:.0f}s] {topo} n={n} {size:g} MB {mode} loss {loss:g}% "
                                  f"jobs {jobs}")
                    if mode == "ring":
                        results = [tb.run_ring(JobRun(1, spec.dtype, elements(size)))]
                    else:
                        results = tb.run_switch([JobRun(j, spec.dtype, elements(size), loss=loss / 100)
                                                 for j in range(1, jobs + 1)])
                    rows.append(row(topo, size, loss, jobs, results, rate))
                    res.write_json("rows.json", rows)
            health[f"{topo}-{n}"] = assess(cpu=cpu.summary(), reasons=saturated(rows[first:]))
        summary = summarise(rows)
        table(rows, summary, res.out)
        plots(rows, summary, res.dir)
        doc = {"rows": rows, **summary, "switch_budget_bps": spec.switch_budget_bps,
               "window": spec.window, "dtype": spec.dtype,
               "notes": ["loss injected at the workers' send path (seeded); ring runs lossless",
                         "jobs=2: both jobs concurrently on the switch vs two rings back to back",
                         "bytes_per_worker_link: wire bytes (headers included), max of up/down, per job"]}
        block = res.health(health)
        res.write_json("metrics.json", {**doc, **block})
        res.finish({**doc, "emulator_ok": block["emulator_ok"]})
        bad = [r for r in rows if not r["correct"]]
        if bad:
            res.out.print(f"[red]{len(bad)} rows returned wrong results[/red]")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
