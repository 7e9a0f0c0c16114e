"""``testbed collective``: NCCL-tests-style collectives over the soft-RDMA endpoints of a replica.

    testbed collective run [--fabric small|fat-tree-k4|rail-small|agg-leaf|agg-leaf-spine] [--collective allreduce]
        [--algorithm ring|tree|innetwork]
        [--ranks 4] [--sizes 64KiB,256KiB,1MiB] [--placement packed[,spread]] [--jobs 1] [--pods] [--chunks 4]
        [--iters 2] [--warmup 1] [--skew 1] [--link-rate 10M] [--nic-rate RANK=RATE,...] [--trace FILE]
        [--failures SCHEDULE] [--ovs-send-buffer SIZE] [--out DIR] [--json]
        (root) one rank per host, RDMA SENDs on RC QPs; prints size, time, algbw, busbw (real-world GB/s
        with the emulated Mb/s beside) and #wrong, per job; JCT, busiest links, emulator health.
        --algorithm innetwork (--fabric agg-leaf|agg-leaf-spine): the allreduce through the aggregation
        switch of testbed/agg (BMv2, p4/aggregation.p4), the same rows; elsewhere refused
    testbed collective schedule --collective C --ranks N --size S [--algorithm A] [--chunks K] [--json]
        (no root) the schedule's steps and bytes per rank, executed in memory and checked element by element
    testbed collective trace FILE [--json]
        (no root) validate a trace (docs/collectives.md) and simulate it: mismatches and deadlocks named
    testbed collective place --fabric F --ranks N [--placement P] [--jobs J] [--pods] [--json]
        (no root) the hosts each job gets and the switch hops of its ring
    testbed collective chakra PREFIX_OR_FILES... -o FILE [--iterations N] [--data-deps-only] [--json]
        (no root) convert Chakra execution traces (one .et per rank) into a trace, validated and simulated
"""

from __future__ import annotations

import argparse

from testbed.cli import add_verbs
from testbed.console import out, print_json, require_root

#: Largest ranks x buffer ``collective schedule`` executes (every rank's buffers are numpy arrays here).
SCHEDULE_MEMORY = 256 << 20


def _common(p, run: bool) -> None:
    from testbed.collective.experiment import DEFAULT_LINK_RATE, FABRICS, add_send_buffer_option
    from testbed.collective.innetwork import FABRICS as AGG_FABRICS
    from testbed.collective.schedule import COLLECTIVES

    fabrics = FABRICS + (tuple(AGG_FABRICS) if run else ())
    p.add_argument("--fabric", default="small", help=f"one of {', '.join(fabrics)} (default small)"
                   + ("; agg-*: BMv2 with the aggregation switch, allreduce --algorithm innetwork only" if run else ""))
    p.add_argument("--ranks", type=int, default=4, help="ranks per job (default 4)")
    p.add_argument("--placement", default="packed", help="packed | spread | rail-aware, or one per job: packed,spread")
    p.add_argument("--jobs", type=int, default=1, help="concurrent jobs on disjoint hosts (default 1)")
    p.add_argument("--pods", action="store_true", help="each job in its own pod (fat-tree)")
    if run:
        p.add_argument("--collective", default="allreduce", help=f"one of {', '.join(COLLECTIVES)}")
        p.add_argument("--algorithm", help="ring | tree (allreduce; default ring), innetwork (allreduce through the "
                                           "aggregation switch: --fabric agg-leaf or agg-leaf-spine, its default)")
        p.add_argument("--sizes", default="64KiB,256KiB,1MiB", help="comma-separated message sizes (default 64KiB,256KiB,1MiB)")
        p.add_argument("--chunks", type=int, default=4, help="pipeline chunks per step (default 4)")
        p.add_argument("--iters", type=int, default=2, help="timed iterations per size (default 2)")
        p.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
        p.add_argument("--skew", type=float, default=1.0, help="all_to_all: the hot rank gets SKEW x a share (default 1)")
        p.add_argument("--root", type=int, default=0, help="broadcast root rank (default 0)")
        p.add_argument("--link-rate",
                       help=f"emulated host-link rate; sets the time dilation (default {DEFAULT_LINK_RATE}; on the "
                            "aggregation fabrics 16M / ranks, the switch budget of scenarios/specs/allreduce.yaml)")
        p.add_argument("--nic-rate", metavar="RANK=RATE,...",
                       help="ranks with slower NICs (real units, every job), e.g. 1=25G,3=50G: their host links run "
                            "at that rate; the report says which rank gates the job (docs/collectives.md)")
        p.add_argument("--trace", help="replay this trace (JSON, docs/collectives.md) instead of a sweep")
        p.add_argument("--failures", metavar="SCHEDULE",
                       help="fail links/switches during the job, e.g. 2s:down:t0-a0,4s:up:t0-a0 (times after the "
                            "start barrier, emulated; docs/failures.md)")
        add_send_buffer_option(p)
        p.add_argument("--alone", action="store_true",
                       help="with --jobs 2+: run each job alone first, then together: slowdowns, and jobs.png with the "
                            "fabric links each job used (ECMP collisions named)")
        p.add_argument("--out", metavar="DIR", help="results folder (default results/collective/<timestamp>)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def register(sub) -> None:
    parser = sub.add_parser("collective", help="NCCL-tests-style collectives over soft-RDMA on a replica",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = add_verbs(parser)
    r = verbs.add_parser("run", help="run collectives (a size sweep, several jobs, or a trace) on a replica (root)")
    _common(r, True)
    r.set_defaults(func=run)
    s = verbs.add_parser("schedule", help="a collective's schedule, executed in memory and verified (no root)")
    s.add_argument("--collective", default="allreduce")
    s.add_argument("--algorithm")
    s.add_argument("--ranks", type=int, default=4)
    s.add_argument("--size", default="1M", help="bytes per rank buffer (default 1M)")
    s.add_argument("--chunks", type=int, default=1)
    s.add_argument("--skew", type=float, default=1.0)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=schedule)
    t = verbs.add_parser("trace", help="validate and simulate a trace file (no root)")
    t.add_argument("file")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=trace)
    p = verbs.add_parser("place", help="hosts per job and the switch hops of each ring (no root)")
    _common(p, False)
    p.set_defaults(func=place)
    from testbed.commands import collective_chakra

    collective_chakra.add_parser(verbs)


def schedule(args) -> int:
    from testbed.collective import metrics, verify
    from testbed.collective import schedule as S
    from testbed.collective.engine import simulate
    from testbed.errors import SpecError
    from testbed.units import parse_size

    if args.algorithm == "innetwork":
        raise SpecError("--algorithm", "innetwork aggregates in the switch and has no host schedule; run it with "
                                       "sudo testbed collective run --fabric agg-leaf --algorithm innetwork")
    size = int(parse_size(args.size, "--size"))
    if size % 4:
        raise SpecError("--size", f"must be a multiple of 4 bytes (int32 elements), got {args.size}")
    if not 1 <= args.skew < float("inf"):
        raise SpecError("--skew", f"must be a finite number >= 1, got {args.skew!r}")
    if args.ranks > 64:
        raise SpecError("--ranks", f"at most 64 ranks, got {args.ranks}")
    if size * max(args.ranks, 1) > SCHEDULE_MEMORY:
        raise SpecError("--size", f"the schedule runs in memory: ranks x size at most {SCHEDULE_MEMORY >> 20} MiB, "
                                  f"got {args.ranks} x {args.size}")
    counts = S.skewed_counts(args.ranks, size // 4, 0, args.skew) if args.skew != 1 and args.ranks >= 2 else None
    sched = S.build(args.collective, args.ranks, size // 4, args.algorithm, args.chunks, 0, counts)
    bufs, stats = simulate(sched, [verify.initial_buffers(sched, r) for r in range(sched.n)])
    wrong = sum(verify.wrong(sched, r, bufs[r]) for r in range(sched.n))
    doc = {"collective": sched.collective, "algorithm": sched.algorithm, "ranks": sched.n, "size_bytes": size,
           "ops_per_rank": [len(r) for r in sched.ranks],
           "sent_bytes_per_rank": [e * 4 for e in stats["sent_elements"]],
           "sent_over_size": [round(e * 4 / size, 4) for e in stats["sent_elements"]],
           "bus_factor": metrics.bus_factor(sched.collective, sched.n), "rounds": stats["rounds"], "wrong": wrong}
    if args.json:
        print_json(doc)
    else:
        for k, v in doc.items():
            out.print(f"{k:>20}: {v}")
    return 0 if wrong == 0 else 1


def trace(args) -> int:
    from testbed.collective.experiment import load_trace_file
    from testbed.collective.trace import check, load_trace

    doc = load_trace_file(args.file)
    stats = check(load_trace(doc))
    result = {"file": args.file, "ranks": doc["ranks"], "iterations": doc.get("iterations", 1), "ok": True,
              "sent_bytes_per_rank": [e * 4 for e in stats["sent_elements"]],
              "compute_only_step_s": stats["time_s"] / doc.get("iterations", 1)}
    if args.json:
        print_json(result)
    else:
        out.print(f"{args.file}: valid; {doc['ranks']} ranks, bytes sent per rank {result['sent_bytes_per_rank']}, "
                  f"compute alone {result['compute_only_step_s'] * 1e3:g} ms per iteration")
    return 0


def place(args) -> int:
    from testbed.collective import placement as P
    from testbed.collective.experiment import FABRICS, Options, check_job_count, fabric_graph, place_jobs
    from testbed.errors import SpecError

    if args.fabric not in FABRICS:
        raise SpecError("--fabric", f"unknown fabric {args.fabric!r}; allowed: {', '.join(FABRICS)}")
    places = tuple(x.strip() for x in args.placement.split(","))
    for x in places:
        if x not in P.POLICIES:
            raise SpecError("--placement", f"unknown policy {x!r}; allowed: {', '.join(P.POLICIES)}")
    if args.jobs < 1 or len(places) not in (1, args.jobs):
        raise SpecError("--placement", f"give one policy or one per job ({args.jobs})")
    check_job_count(args.fabric, args.jobs)
    G = fabric_graph(args.fabric)
    opts = Options(fabric=args.fabric, ranks=args.ranks, jobs=args.jobs, pods=args.pods,
                   placement=places * args.jobs if len(places) == 1 else places)
    jobs = place_jobs(G, opts)
    doc = {"fabric": args.fabric, "jobs": [{"policy": opts.placement[k], "hosts": [str(h) for h in hs],
                                            "ring_switch_hops": P.ring_hops(G, hs)} for k, hs in enumerate(jobs)]}
    if args.json:
        print_json(doc)
    else:
        for k, j in enumerate(doc["jobs"]):
            out.print(f"job{k + 1} ({j['policy']}): {' '.join(j['hosts'])}  ring hops {j['ring_switch_hops']}")
    return 0


def run(args) -> int:
    from testbed.collective import experiment as X
    from testbed.errors import EmulationError
    from testbed.scenario import Results

    opts = X.Options.from_args(args)
    if opts.fabric in X.FABRICS:   # the aggregation fabrics' workers are their hosts in order (no placement)
        X.place_jobs(X.fabric_graph(opts.fabric), opts)    # refuse a placement that does not fit before root/build
    require_root("testbed collective run")
    with Results("collective", args, config={"options": {k: v for k, v in vars(opts).items()
                                                         if k not in ("trace", "failures")},
                                              "failures": args.failures,
                                              "trace": opts.trace}) as res:
        result = X.run(opts, res.dir)
        X.print_report(result, quiet_stdout=args.json)
        res.write_json("metrics.json", result)
        if result.get("failures", {}).get("error"):
            raise EmulationError(f"failure schedule: {result['failures']['error']} (the fabric was restored)")
        if any(j.get("rows") for j in result["jobs"]):
            X.plot(result["jobs"], opts.link_rate_bps, res.dir / "busbw.png", scale=result["scale"])
        if result.get("alone"):
            from testbed.collective import jobsfig

            a = result["alone"]
            jobsfig.plot(a["jct_alone_s"], a["jct_together_s"], a["rows"], res.dir / "jobs.png",
                         title=f"{opts.jobs} jobs of {opts.ranks} ranks on {opts.fabric}, placements "
                               f"{','.join(opts.placement)}: alone, then together")
        wrong = sum(r["wrong"] for j in result["jobs"] for r in j.get("rows", [])) + \
            sum(j["trace"]["wrong"] for j in result["jobs"] if "trace" in j)
        res.finish(X.summary(result))
    return 1 if wrong else 0
