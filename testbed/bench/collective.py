"""``testbed bench collective``: collective figures on a k=4 fat-tree replica, as ratios in one run.

    k=4 fat-tree (20 OVS switches, os-ken ECMP controller), every link 100G real, --link-rate emulated
      1. ring allreduce, --ranks spread over ToRs (every ring hop crosses the fabric), largest --sizes:
         busbw / host-link rate                      goal >= 0.8 (nccl-tests' busbw definition)
      2. uniform all-to-all (smallest size) on the same ranks: busbw / the bisection-limited bound (a full-bisection
         fat-tree: the host link, so the bound is the link rate)    goal >= 0.7
      3. two 4-rank ring allreduce jobs packed in pods 0 and 1 (they share no link): each alone, then
         both at once, --repeats rounds interleaved (so a drift of the machine falls on all three alike);
         slowdown = median JCT together / median JCT alone            goal < 1.05
         ``jobs.png`` (testbed/collective/jobsfig.py): the JCTs, and the fabric links each job used alone
         and together; a link both jobs used alone is named (``shared_links``): with disjoint pods, none

ovs-vswitchd's send buffer is raised to 4 MiB for each part and restored after (``SEND_BUFFER``; ``--ovs-send-buffer
off`` leaves it at its default, where the all-to-all loses frames inside OVS and is reported unhealthy).

Every figure is printed with the machine's load before and after and the emulator's health verdict of
its run (an unhealthy run is marked, not hidden). ``--json`` keys: busbw_over_link, a2a_busbw_over_bound,
interference (max slowdown - 1), jct_alone_runs_s, jct_together_runs_s, shared_links, above_links, rows, load_before,
load_after, health.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from testbed.console import console, out, print_json, require_root
from testbed.emu.cpustat import load_average
from testbed.errors import EmulationError, SpecError
from testbed.units import parse_rate, parse_size

#: the bench raises ovs-vswitchd's send buffer for each part (restored after; ``--ovs-send-buffer off`` leaves it):
#: at its 208 KiB default the all-to-all loses frames inside OVS, so the figure would be the emulator's
#: (docs/collectives.md "Where OVS's userspace datapath loses frames")
SEND_BUFFER = "4MiB"


def register(sub) -> None:
    p = sub.add_parser("collective", help="ring allreduce busbw vs link rate, all-to-all, two-job interference",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=8, help="ranks of parts 1 and 2 (default 8)")
    p.add_argument("--sizes", default="1MiB,4MiB", help="allreduce sizes; the largest is graded (default 1MiB,4MiB)")
    p.add_argument("--link-rate", default="10M", help="emulated host-link rate (default 10M)")
    p.add_argument("--iters", type=int, default=2, help="timed iterations per size (default 2)")
    p.add_argument("--no-jobs", action="store_true", help="skip part 3 (two jobs)")
    p.add_argument("--repeats", type=int, default=3,
                   help="rounds of part 3 (alone, alone, together), medians compared (default 3)")
    from testbed.collective.experiment import add_send_buffer_option

    add_send_buffer_option(p, default=SEND_BUFFER)
    p.add_argument("--out", metavar="DIR", help="where the runs' files go (default a temp folder)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=run)


def default_send_buffer(X) -> int | None:
    """SEND_BUFFER where the replica's switches will be OVS on the userspace datapath (the only one with the
    shared send socket), else None: the kernel datapath has no such socket to raise (root: probes doctor)."""
    from testbed.doctor import plan_capabilities

    if plan_capabilities().ovs_kernel:      # the plan puts OVS on the kernel datapath then
        return None
    return X.send_buffer_arg(SEND_BUFFER)


def _load() -> list[float]:

    return [round(x, 2) for x in load_average()]


def run(args) -> int:
    rate = parse_rate(args.link_rate, "--link-rate")
    sizes = sorted(int(parse_size(s.strip(), "--sizes")) for s in args.sizes.split(","))
    if any(s % 4 or s < 4 * args.ranks for s in sizes):
        raise SpecError("--sizes", f"sizes must be multiples of 4 bytes holding one int32 per rank ({4 * args.ranks} B)")
    if not 2 <= args.ranks <= 16:
        raise SpecError("--ranks", f"must be 2..16 (a k=4 fat-tree has 16 hosts), got {args.ranks}")
    if args.iters < 1:
        raise SpecError("--iters", f"must be >= 1, got {args.iters}")
    if not 1 <= args.repeats <= 20:
        raise SpecError("--repeats", f"must be 1..20, got {args.repeats}")
    from testbed.collective import experiment as X

    sndbuf = X.send_buffer_arg(args.ovs_send_buffer)
    require_root("testbed bench collective")
    if args.ovs_send_buffer is None:
        sndbuf = default_send_buffer(X)
    from testbed.collective import placement as P
    from testbed.collective.runner import CollectiveFabric, JobRun

    G = X.fabric_graph("fat-tree-k4")
    folder = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-collective-"))
    doc = {"link_rate_bps": rate, "ranks": args.ranks, "load_before": _load(), "health": {},
           "ovs_send_buffer": sndbuf or "not applied"}
    spread = P.place(G, args.ranks, "spread")
    pods = P.pods(G)
    a = P.place(G, 4, "packed", within=set(pods[0]))
    b = P.place(G, 4, "packed", within=set(pods[1]))
    ring = tuple({"collective": "allreduce", "algorithm": "ring", "bytes": s, "chunks": 4} for s in sizes)
    a2a = ({"collective": "all_to_all", "bytes": sizes[0], "chunks": 2},)
    doc["wrong"], doc["rows"], doc["failed"] = 0, [], {}

    def part(name, jobs):
        """One run; a run that fails (a QP gave up) is reported with its reason, the others still run."""
        try:
            result = fab.run(jobs, name)
        except EmulationError as exc:
            doc["failed"][name] = str(exc)
            console.print(f"[red]{name}: {exc}[/red]")
            return None
        doc["health"][name] = result["health"]
        doc["wrong"] += sum(r["wrong"] for j in result["jobs"] for r in j.get("rows", []))
        return result

    with CollectiveFabric(G, rate, folder, name="bench-collective", send_buffer=sndbuf) as fab:
        fab.warm(spread + [h for h in a + b if h not in spread])
        r1 = part("ring", [JobRun("ring", tuple(spread), runs=ring, iters=args.iters, warmup=1)])
        if r1:
            doc["rows"] += r1["jobs"][0]["rows"]
            doc["busbw_over_link"] = round(r1["jobs"][0]["rows"][-1]["busbw_bps"] / rate, 3)
        r2 = part("all_to_all", [JobRun("a2a", tuple(spread), runs=a2a, iters=args.iters, warmup=1)])
        if r2:
            doc["rows"] += r2["jobs"][0]["rows"]
            doc["a2a_busbw_over_bound"] = round(r2["jobs"][0]["rows"][-1]["busbw_bps"] / rate, 3)
        if not args.no_jobs:
            one = (ring[-1],)
            ja, jb = JobRun("pod0", tuple(a), runs=one, iters=args.iters), JobRun("pod1", tuple(b), runs=one,
                                                                                  iters=args.iters, seed=2)
            rounds = [two_jobs_round(part, ja, jb, k + 1 if args.repeats > 1 else None) for k in range(args.repeats)]
            rounds = [r for r in rounds if r is not None]
            if rounds:
                jobs_summary(doc, rounds, G, folder / "jobs.png", rate)
    doc["load_after"] = _load()
    doc["results_dir"] = str(folder)
    _print(doc, rate, console if args.json else out)   # --json: stdout carries the JSON document only
    if args.json:
        print_json(doc)
    return 1 if doc["wrong"] or doc["failed"] else 0


def two_jobs_round(part, ja, jb, k: int | None):
    """One round of part 3: each job alone, then both; None when a run failed (its reason is in ``failed``)."""
    tag = "" if k is None else f"-{k}"
    alone = [part(f"alone-pod0{tag}", [ja]), part(f"alone-pod1{tag}", [jb])]
    both = part(f"together{tag}", [ja, jb])
    return (alone, both) if all(alone) and both else None


def jobs_summary(doc: dict, rounds: list, G, png, rate: float) -> None:
    """Part 3's figures from its rounds: median JCTs, slowdowns, the links each job used in the last round
    (``experiment.alone_summary``: a run alone and together), and ``jobs.png``."""
    from statistics import median

    from testbed.collective import experiment as X
    from testbed.collective import jobsfig

    alone_runs = [[r[0][i]["jobs"][0]["jct_s"] for r in rounds] for i in (0, 1)]
    both_runs = [[r[1]["jobs"][i]["jct_s"] for r in rounds] for i in (0, 1)]
    doc["jct_alone_runs_s"], doc["jct_together_runs_s"] = alone_runs, both_runs
    doc["jct_alone_s"] = [median(x) for x in alone_runs]
    doc["jct_together_s"] = [median(x) for x in both_runs]
    doc["slowdown"] = [round(t / s, 3) for t, s in zip(doc["jct_together_s"], doc["jct_alone_s"], strict=True)]
    doc["interference"] = round(max(doc["slowdown"]) - 1, 3)
    last_alone, last_both = rounds[-1]
    doc["busiest_links_together"] = last_both["links"][:4]
    links = X.alone_summary({"pod0": last_alone[0], "pod1": last_alone[1]}, last_both, G)
    rows = links["rows"]
    doc["shared_links"], doc["above_links"] = links["shared_links"], links["above_links"]
    doc["fabric_links_used"] = {job: sum(job in r["users"] for r in rows) for job in ("pod0", "pod1")}
    jobsfig.plot(dict(zip(("pod0", "pod1"), doc["jct_alone_s"], strict=True)),
                 dict(zip(("pod0", "pod1"), doc["jct_together_s"], strict=True)), rows, png,
                 title=f"two 4-rank ring allreduce jobs, pods 0 and 1 of fat-tree-k4, {rate / 1e6:g} Mb/s links; "
                       f"median of {len(rounds)} rounds")
    doc["jobs_png"] = str(png)


def _print(doc: dict, rate: float, out) -> None:
    from testbed.collective import metrics

    def verdict(h):
        return "healthy" if h["ok"] else "UNHEALTHY: " + "; ".join(h["reasons"])

    for coll in dict.fromkeys(r["collective"] for r in doc["rows"]):
        out.print(metrics.table_text([r for r in doc["rows"] if r["collective"] == coll]))
    for name, why in doc["failed"].items():
        out.print(f"{name}: FAILED ({why})")
    if "busbw_over_link" in doc:
        out.print(f"ring allreduce busbw / host link ({rate / 1e6:g} Mb/s): {doc['busbw_over_link']:.3f}  (goal >= 0.8; "
                  f"{verdict(doc['health']['ring'])})")
    if "a2a_busbw_over_bound" in doc:
        out.print(f"all-to-all busbw / bisection bound: {doc['a2a_busbw_over_bound']:.3f}  (goal >= 0.7; "
                  f"{verdict(doc['health']['all_to_all'])})")
    if "interference" in doc:
        runs = {k: h for k, h in doc["health"].items() if k.startswith(("together", "alone"))}
        health = "all healthy" if all(h["ok"] for h in runs.values()) else "; ".join(
            f"{k}: {verdict(h)}" for k, h in runs.items() if not h["ok"])
        out.print(f"two jobs on disjoint pods: median JCT alone {[round(x, 3) for x in doc['jct_alone_s']]} s, "
                  f"together {[round(x, 3) for x in doc['jct_together_s']]} s ({len(doc['jct_alone_runs_s'][0])} "
                  f"rounds), slowdown {doc['slowdown']} -> interference {doc['interference']:+.1%} (goal < 5%; "
                  f"{health})")
        out.print(f"fabric links used alone: pod0 {doc['fabric_links_used']['pod0']}, pod1 "
                  f"{doc['fabric_links_used']['pod1']}; used by both alone: {', '.join(doc['shared_links']) or 'none'}; "
                  f"above any job's busiest link together: {', '.join(doc['above_links']) or 'none'} ({doc['jobs_png']})")
    if doc["ovs_send_buffer"] != "not applied":
        recs = [h["ovs_send_buffer_raised"] for h in doc["health"].values()]
        out.print(f"ovs-vswitchd's send buffer: {doc['ovs_send_buffer']:,} B in each of {len(recs)} parts (before: "
                  f"{sorted({r['before'] for r in recs})} B), restored after each: "
                  f"{'yes' if all(r.get('restored') for r in recs) else 'NO'}")
    out.print(f"#wrong {doc['wrong']}; load before {doc['load_before']}, after {doc['load_after']}")
    console.print(f"[dim]files in {doc['results_dir']}[/dim]")
