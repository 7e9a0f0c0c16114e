"""Collectives over soft-RDMA on a replica: nccl-tests-style sweeps, two jobs at once, a trace replay.

    small (quick):   spine s0                      fat-tree-k4 (full): 4 pods, 4 cores, 16 hosts
                    /        \\                        job1: 4 ranks packed in pod 0
                 leaf l0    leaf l1                   job2: 4 ranks spread over pod 1's ToRs
                 h0  h1     h2  h3   (4 ranks)        (each in its own pod: they share only cores)

Every rank is a process in its host's namespace with a soft RoCEv2 device; data moves as RDMA SENDs on
RC QPs into pre-posted receive buffers, every element is checked against numpy (``#wrong``). Links run
at ``--link-rate`` (emulated; 100G real, so scale = 100G / rate).

What it shows:
  1. ring allreduce over a size sweep, tree allreduce, uniform and skewed all-to-all, reduce-scatter,
     all-gather, broadcast: time, algbw, busbw (nccl-tests' formulas), real-world and emulated
  2. (full) two jobs on one fabric, each with its own placement: JCT alone and together, per-link
     utilisation (an ECMP collision shows as a link above the others); jobs.png: the JCTs and the fabric
     links each job used alone and together, a link both used named (``shared_links``)
  3. a trace replay (compute gaps, an allreduce, point-to-point activations): step time per iteration
  4. acceptance after SONiC's RoCEv2 plan, on fat-tree-k4 with 8 ranks (testbed/collective/acceptance.py):
     a ring allreduce across a link failure (JCT without/with, #wrong 0), 7:1 incast per-QP fairness
     (< 30%), the 8-rank all-to-all verdict; --acceptance-only runs it alone, --no-acceptance leaves it out
  5. in-network allreduce through the BMv2 aggregation switch (agg-leaf, 4 ranks, the sweep's sizes;
     testbed/collective/innetwork.py as `testbed collective run --fabric agg-leaf` runs it): its rows, #wrong,
     and its algbw over its link rate beside the ring's at the same sizes. Its own replica and link rate (the
     aggregation spec's 16 Mbit/s budget shared by 4 workers, which BMv2 sustains; 4 x 10M would exceed it),
     so the fractions of the link rate compare, not the times; --no-innetwork leaves it out. busbw.png draws
     part 1's bandwidths and, beside them, ring and in-network allreduce algbw and busbw over their own links
  and the emulator's health and the frames lost, attributed to the queue that dropped them. The sweep
  also captures rank 0's first 1500 RoCEv2 frames (both ways at its host link) and checks them as
  ``testbed roce check --expect-ect`` (``data_check`` in the summary: ECN-capable, 0 violations); a
  failed check fails the run (exit 1), as an inexact element does.
  ``--failures SCHEDULE`` fails links or switches of the small fabric during the sweep (docs/failures.md).
  ``--ovs-send-buffer 4MiB`` raises ovs-vswitchd's one send socket's buffer for each run and restores it
  (the default 208 KiB loses frames under all-to-all; the daemon is shared: opt-in, docs/collectives.md).

    sudo testbed run collective --quick      # small fabric, 4 ranks, up to 256 KiB; parts 4, 5 (~2 min)
    sudo testbed run collective              # + fat-tree-k4 two jobs, sizes up to 4 MiB (part 5 too)
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and __package__ is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.console import console, data_console, require_root  # noqa: E402
from testbed.errors import SpecError  # noqa: E402
from testbed.scenario import Results, run_main, scenario_parser  # noqa: E402
from testbed.units import parse_rate  # noqa: E402

NAME = "collective"

#: the replayed trace: a forward pass (compute), gradients allreduced while rank 0 ships activations to
#: rank 1 (pipeline parallelism), two training steps
TRACE = {"version": 1, "ranks": 4, "iterations": 2, "description": "2 steps: compute, allreduce, p2p",
         "ops": [[{"id": "fwd", "type": "compute", "seconds": 20e-6},
                  {"id": "grad", "type": "collective", "collective": "allreduce", "bytes": 131072},
                  {"id": "act", "type": "send", "peer": 1, "bytes": 32768, "deps": ["fwd"]}],
                 [{"id": "fwd", "type": "compute", "seconds": 20e-6},
                  {"id": "grad", "type": "collective", "collective": "allreduce", "bytes": 131072},
                  {"id": "act", "type": "recv", "peer": 0, "bytes": 32768, "deps": ["fwd"]}],
                 [{"id": "fwd", "type": "compute", "seconds": 10e-6},
                  {"id": "grad", "type": "collective", "collective": "allreduce", "bytes": 131072}],
                 [{"id": "fwd", "type": "compute", "seconds": 10e-6},
                  {"id": "grad", "type": "collective", "collective": "allreduce", "bytes": 131072}]]}


#: part 5: the fabric with an aggregation switch and its ranks (testbed/collective/innetwork.py)
INNETWORK_FABRIC, INNETWORK_RANKS = "agg-leaf", 4

#: part 4's sizes: ring allreduce per rank, incast per sender, all-to-all per rank (bytes)
ACCEPTANCE_SIZES = {"ring": 262144, "incast": 65536, "alltoall": 262144}


def sweep(sizes: list[int], big: int) -> tuple:
    """The runs of the single-job part (one process per rank runs them all)."""
    runs = [{"collective": "allreduce", "algorithm": "ring", "bytes": b, "chunks": 4} for b in sizes]
    runs += [{"collective": "allreduce", "algorithm": "tree", "bytes": big, "chunks": 4},
             {"collective": "reduce_scatter", "bytes": big, "chunks": 2},
             {"collective": "all_gather", "bytes": big, "chunks": 2},
             {"collective": "broadcast", "bytes": big, "chunks": 8},
             {"collective": "all_to_all", "bytes": big, "chunks": 2},
             {"collective": "all_to_all", "bytes": big, "chunks": 2, "skew": 4.0}]
    return tuple(runs)


def main(argv=None) -> int:
    parser = scenario_parser(__doc__, prog=f"testbed run {NAME}")
    parser.add_argument("--link-rate", default="10M", help="emulated host-link rate (default 10M)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--acceptance-only", action="store_true", help="run part 4 alone")
    which.add_argument("--no-acceptance", action="store_true", help="leave part 4 out")
    parser.add_argument("--no-innetwork", action="store_true", help="leave part 5 (in-network allreduce, BMv2) out")
    parser.add_argument("--failures", metavar="SCHEDULE", help="fail links/switches of the small fabric during the "
                        "sweep, e.g. 1s:down:s0-l1,2s:up:s0-l1 (docs/failures.md)")
    from testbed.collective import experiment as X
    from testbed.failures import parse as parse_failures

    X.add_send_buffer_option(parser)
    args = parser.parse_args(argv)
    rate = parse_rate(args.link_rate, "--link-rate")
    if not 1e5 <= rate <= 1e9:
        raise SpecError("--link-rate", f"must be between 100k and 1G (emulated host-link rate), got {args.link_rate}")
    sndbuf = X.send_buffer_arg(args.ovs_send_buffer)
    failures = None
    if args.failures:
        from testbed.plan import Overrides
        from testbed.plan.gray import gray_links_of

        small = X.fabric_graph("small")
        failures = parse_failures(args.failures, small, gray_links=gray_links_of(
            small, Overrides(scale=X.host_link_rate(small) / rate, links="rates")))
    if failures and args.acceptance_only:
        raise SpecError("--failures", "applies to the sweep (parts 1-3), which --acceptance-only leaves out")
    require_root(f"testbed run {NAME}")
    from testbed.collective import acceptance as A
    from testbed.collective import placement as P
    from testbed.collective.runner import CollectiveFabric, JobRun

    sizes = [65536, 262144] if args.quick else [65536, 262144, 1048576, 4194304]
    with Results(NAME, args, config={"quick": args.quick, "link_rate_bps": rate, "sizes": sizes,
                                     "failures": args.failures, "ovs_send_buffer": sndbuf}) as res:
        doc, summary, wrong, failed = {"link_rate_bps": rate, "parts": {}}, {}, 0, []
        if not args.acceptance_only:
            r1, r3 = small_parts(args, rate, sizes, failures, res.dir, X, P, CollectiveFabric, JobRun, sndbuf)
            doc["parts"].update(sweep=r1, trace=r3)
            summary = small_summary(r1, r3, rate, X)
            wrong = summary["wrong"]
            if not args.quick:
                doc["parts"]["jobs"] = two_jobs(rate, res.dir / "fat-tree", X, P, CollectiveFabric, JobRun, args.json,
                                                sndbuf)
                summary["two_jobs"] = doc["parts"]["jobs"]["summary"]
        if not args.no_acceptance:
            console.print("[bold]4. acceptance after SONiC's RoCEv2 plan: fat-tree-k4, 8 ranks[/bold]")
            doc["parts"]["acceptance"] = A.run(rate, res.dir / "acceptance", ACCEPTANCE_SIZES, args.json, sndbuf)
            verdict = summary["acceptance"] = doc["parts"]["acceptance"]["verdict"]
            failed += [k for k in ("link_failure", "incast", "alltoall") if not verdict[k]["pass"]]
        if not (args.acceptance_only or args.no_innetwork):
            doc["parts"]["innetwork"] = innetwork_part(sizes, res.dir / "innetwork", X, args.json)
            inn = summary["innetwork"] = innetwork_summary(doc["parts"]["innetwork"], doc["parts"].get("sweep"))
            data_console(args.json).print(innetwork_line(inn))
            if not inn["exact"]:
                failed.append("innetwork")
        if "sweep" in doc["parts"]:
            figure(doc["parts"], res.dir / "busbw.png", X)
        block = res.health({k: r["health"]["block"] for k, r in health_parts(doc["parts"]).items()})
        res.write_json("metrics.json", {**doc, **block})
        summary.update(emulator_ok=block["emulator_ok"], health_reasons=block["emulator"]["reasons"],
                       ovs_send_buffer=send_buffer_summary(sndbuf, {k: r for k, r in health_parts(doc["parts"]).items()
                                                                    if k != "innetwork"}))   # BMv2: no OVS
        res.finish(summary)
    return 1 if wrong or failed or not data_ok(summary) else 0


def data_ok(summary: dict) -> bool:
    """The sweep's data sample passed ``roce check --expect-ect`` (``data_check``; True when the run has no
    sweep: --acceptance-only). A failed one fails the run (exit 1), as an inexact element does."""
    return summary.get("data_check", {"ok": True})["ok"]


def send_buffer_summary(size: int | None, runs: dict):
    """``--ovs-send-buffer`` in the summary: "not applied", or the size and whether every run put the
    buffer back (``restored``: each run's :class:`testbed.emu.ovssndbuf.Raised` record is in its health)."""
    if size is None:
        return "not applied"
    records = [r["health"]["ovs_send_buffer_raised"] for r in runs.values()]
    return {"bytes": size, "runs": len(records), "before": sorted({x["before"] for x in records}),
            "restored": all(x.get("restored") for x in records)}


def health_parts(parts: dict) -> dict:
    """Every run of the scenario by name, for the one health block (testbed.emu.runhealth)."""
    out = {k: parts[k] for k in ("sweep", "trace") if k in parts}
    if "jobs" in parts:
        jobs = parts["jobs"]
        out.update({"alone-job1": jobs["alone"][0], "alone-job2": jobs["alone"][1], "together": jobs["together"]})
    if "acceptance" in parts:
        runs = parts["acceptance"]["runs"]
        out.update({f"ring-baseline-{k + 1}": r for k, r in enumerate(runs["ring_baseline"])})
        out.update({"ring-failure": runs["ring_failure"], "incast": runs["incast"], "alltoall": runs["alltoall"]})
    if "innetwork" in parts:
        out["innetwork"] = parts["innetwork"]
    return out


def innetwork_part(sizes: list[int], out, X, quiet=False) -> dict:
    """Part 5: the allreduce through the aggregation switch, by ``experiment.run`` as ``testbed collective run
    --fabric agg-leaf`` runs it (testbed/collective/innetwork.py), at the aggregation spec's link rate."""
    from testbed.collective import innetwork as IN

    opts = X.Options(fabric=INNETWORK_FABRIC, algorithm=IN.ALGORITHM, ranks=INNETWORK_RANKS, sizes=tuple(sizes),
                     iters=2, warmup=1, link_rate_bps=IN.link_rate(INNETWORK_RANKS), timeout_s=300.0)
    console.print(f"[bold]5. in-network allreduce through the BMv2 aggregation switch: {INNETWORK_FABRIC}, "
                  f"{INNETWORK_RANKS} ranks[/bold]")
    result = X.run(opts, out)
    X.print_report(result, quiet)
    return result


def innetwork_summary(r5: dict, sweep: dict | None) -> dict:
    """Part 5 in the summary: per size its time, algbw, busbw (emulated), #wrong, exact, and its algbw over its
    link rate beside the ring's (part 1, same size; None without a sweep). The two replicas run at their own
    link rates, so the fractions compare, not the times."""
    rate, job = r5["link_rate_bps"], r5["jobs"][0]
    ring = {}
    if sweep is not None:
        ring = {r["size_bytes"]: r["algbw_bps"] / sweep["link_rate_bps"] for r in sweep["jobs"][0]["rows"]
                if r["collective"] == "allreduce" and r["algorithm"] == "ring"}
    sizes = {str(r["size_bytes"]): {
        "time_s": r["time_s"], "times_s": r["times_s"], "algbw_bps": r["algbw_bps"], "busbw_bps": r["busbw_bps"],
        "wrong": r["wrong"], "exact": r["exact"], "algbw_over_link": round(r["algbw_bps"] / rate, 3),
        "ring_algbw_over_link": round(ring[r["size_bytes"]], 3) if r["size_bytes"] in ring else None,
        "bytes_per_link_over_size": r["bytes_per_link_over_size"], "retransmits": r["retransmits"]}
        for r in job["rows"]}
    return {"fabric": r5["fabric"], "ranks": job["ranks"], "aggregator": job["aggregator"], "link_rate_bps": rate,
            "scale": r5["scale"], "wrong": sum(r["wrong"] for r in job["rows"]),
            "exact": bool(job["rows"]) and all(r["exact"] for r in job["rows"]), "sizes": sizes,
            "emulator_ok": r5["health"]["ok"]}


def innetwork_line(inn: dict) -> str:
    """``# in-network vs ring ...``: part 5's algbw over its link rate beside the ring's, size by size."""
    def ring(x):
        return "-" if x["ring_algbw_over_link"] is None else f"{x['ring_algbw_over_link']:.2f}"

    pairs = "; ".join(f"{size} B {x['algbw_over_link']:.2f} vs {ring(x)}" for size, x in inn["sizes"].items())
    return (f"# in-network ({inn['fabric']}, {inn['ranks']} ranks) vs ring (small) at the same sizes, algbw over "
            f"each one's link rate: {pairs}; #wrong {inn['wrong']}")


def comparison(parts: dict) -> list[dict]:
    """The figure's second panel: the ring allreduce of part 1 and the in-network one of part 5 as fractions of
    their own link rates (testbed.collective.figure.link_fractions); none without part 5 (or without a sweep)."""
    from testbed.collective.figure import link_fractions
    from testbed.collective.innetwork import ALGORITHM

    if "innetwork" not in parts or "sweep" not in parts:
        return []
    sw, inn = parts["sweep"], parts["innetwork"]
    return [link_fractions(f"ring, {sw['fabric']} (OVS, soft-RDMA)", sw["jobs"][0]["rows"], sw["link_rate_bps"],
                           sw["scale"], "ring"),
            link_fractions(f"in-network, {inn['fabric']} (BMv2)", inn["jobs"][0]["rows"], inn["link_rate_bps"],
                           inn["scale"], ALGORITHM)]


def figure(parts: dict, path, X) -> None:
    """``busbw.png``: part 1's bandwidths; with part 5, ring and in-network allreduce side by side as fractions
    of their links (the two replicas run at different rates), the rates in the title."""
    from testbed.units import format_rate

    sw, pair = parts["sweep"], comparison(parts)
    title = None
    if pair:
        inn = parts["innetwork"]
        real = sorted({format_rate(c["real_link_bps"]) for c in pair})
        title = (f"part 1 on {sw['fabric']} at {format_rate(sw['link_rate_bps'])} per host link; part 5 (in-network) "
                 f"on {inn['fabric']} at {format_rate(inn['link_rate_bps'])} per worker link: different emulated "
                 f"rates, " + (f"both {real[0]} real" if len(real) == 1 else f"{' and '.join(real)} real"))
    X.plot(sw["jobs"], sw["link_rate_bps"], path, scale=sw["scale"], compare=pair, title=title)


def small_parts(args, rate, sizes, failures, out, X, P, CollectiveFabric, JobRun, sndbuf=None) -> tuple:
    """Parts 1 and 3 on the small fabric (the sweep under ``failures`` if given)."""
    from testbed.collective.trace import check, load_trace

    check(load_trace(TRACE))
    big = 262144 if args.quick else 1048576
    G = X.fabric_graph("small")
    hosts = P.place(G, 4, "packed")
    with CollectiveFabric(G, rate, out / "small", send_buffer=sndbuf) as fab:
        fab.warm(hosts)
        console.print("[bold]1. size sweep and every collective, 4 ranks, small fabric[/bold]")
        r1 = fab.run([JobRun("sweep", tuple(hosts), runs=sweep(sizes, big), iters=2, warmup=1)], "sweep",
                     failures=failures, sample=hosts[0])   # rank 0's data: roce check --expect-ect
        console.print("[bold]3. trace replay[/bold]")
        r3 = fab.run([JobRun("trace", tuple(hosts), trace=TRACE, chunks=2)], "trace")
        for r in (r1, r3):
            r.update(scale=fab.scale, fabric="small", link_rate_bps=rate)
    X.print_report(r1, args.json)
    X.print_report(r3, args.json)
    return r1, r3


def small_summary(r1: dict, r3: dict, rate: float, X) -> dict:
    rows = r1["jobs"][0]["rows"]
    ring = [r for r in rows if r["collective"] == "allreduce" and r["algorithm"] == "ring"]
    doc = {"wrong": sum(r["wrong"] for r in rows) + r3["jobs"][0]["trace"]["wrong"],
           "ring_allreduce_busbw_over_link": round(ring[-1]["busbw_bps"] / rate, 3),
           "largest_ring_size_bytes": ring[-1]["size_bytes"],
           "busbw_over_link": {f"{r['collective']}/{r['algorithm']}/skew{r['skew']:g}/{r['size_bytes']}":
                               round(r["busbw_bps"] / rate, 3) for r in rows},
           "trace_step_time_s": r3["jobs"][0]["trace"]["step_time_s"], "load": r1["health"]["load"],
           "data_check": r1["data_check"]}
    if r1.get("failures"):
        doc["failures"] = X.summary(r1)["failures"]
    return doc


def two_jobs(rate, out, X, P, CollectiveFabric, JobRun, quiet=False, sndbuf=None) -> dict:
    """Two 4-rank ring allreduce jobs on a k=4 fat-tree in disjoint pods: alone, then together; ``jobs.png``
    (testbed/collective/jobsfig.py) draws their JCTs and the fabric links each used."""
    from testbed.collective import jobsfig

    G = X.fabric_graph("fat-tree-k4")
    pods = P.pods(G)
    a = P.place(G, 4, "packed", within=set(pods[0]))
    b = P.place(G, 4, "spread", within=set(pods[1]))
    runs = ({"collective": "allreduce", "algorithm": "ring", "bytes": 1048576, "chunks": 4},)
    ja, jb = JobRun("job1", tuple(a), runs=runs, iters=3), JobRun("job2", tuple(b), runs=runs, iters=3, seed=2)
    with CollectiveFabric(G, rate, out, send_buffer=sndbuf) as fab:
        fab.warm(a + b)
        alone = [fab.run([ja], "alone-job1"), fab.run([jb], "alone-job2")]
        both = fab.run([ja, jb], "together")
    for r in alone + [both]:
        r.update(scale=fab.scale, fabric="fat-tree-k4", link_rate_bps=rate)
        X.print_report(r, quiet)
    a = X.alone_summary({"job1": alone[0], "job2": alone[1]}, both, G)
    jct_alone, jct_both = list(a["jct_alone_s"].values()), [j["jct_s"] for j in both["jobs"]]
    summary = {"jct_alone_s": jct_alone, "jct_together_s": jct_both, "slowdown": list(a["slowdown"].values()),
               "busiest_link_together": both["links"][0], "shared_links": a["shared_links"],
               "above_links": a["above_links"], "emulator_ok": all(r["health"]["ok"] for r in alone + [both])}
    jobsfig.plot(a["jct_alone_s"], a["jct_together_s"], a["rows"], out / "jobs.png",
                 title="two 4-rank ring allreduce jobs (1 MiB), job1 packed in pod 0, job2 spread in pod 1, fat-tree-k4")
    data_console(quiet).print("two jobs on disjoint pods: " + X.alone_line(a))
    return {"alone": alone, "together": both, "summary": summary}


if __name__ == "__main__":
    sys.exit(run_main(main))
