"""Acceptance checks after SONiC's RoCEv2 test plan, on a k=4 fat-tree (8 ranks, one per ToR):

    1. ring allreduce across a link failure: the same job twice without and once with a cut of the fabric
       link it loaded most (busiest switch-switch link of the second run without; the paths repeat: RoCE
       source ports derive from the QP numbers, which derive from job, rank and peer), cut at 30% of the
       mean JCT without, through the controller (port-mod; it reroutes); JCTs, the impact, #wrong 0
    2. N:1 incast (7 senders -> rank 0, each its whole buffer at once), the senders in the other pods so
       every path has the same hops (a sender in the sink's pod, 2 switch hops shorter, got 1.66 Mb/s
       where the others got 1.13-1.27: window-limited QPs whose only latency is the OVS hops share by
       RTT): per-QP rate = bytes / the sender's own finish time; deviation = max |x - mean| / mean < 30%
    3. 8-rank all-to-all: passes when every rank completes with every element exact; busbw / link beside

:func:`fairness` and :func:`busiest_fabric_link` are pure; :func:`run` needs root.
"""

from __future__ import annotations

import statistics

FAIRNESS_LIMIT = 0.30
#: the cut falls at this fraction of the run without failure, so it hits the job mid-flight
CUT_AT = 0.3


def fairness(row: dict, sink: int = 0, limit: float = FAIRNESS_LIMIT) -> dict:
    """Per-QP fairness of an incast row (:func:`testbed.collective.report.job_rows` with ``rank_end_s``):
    each sender's rate is its bytes over its own finish time; the worst timed iteration counts."""
    worst = None
    for ends in row["rank_end_s"]:
        rates = [row["size_bytes"] * 8 / e for r, e in enumerate(ends) if r != sink and e > 0]
        mean = statistics.fmean(rates)
        dev = max(abs(x - mean) for x in rates) / mean
        if worst is None or dev > worst["deviation"]:
            worst = {"rates_bps": [round(x, 1) for x in rates], "mean_bps": round(mean, 1), "deviation": round(dev, 4)}
    return {**worst, "limit": limit, "pass": worst["deviation"] < limit and row["wrong"] == 0}


def busiest_fabric_link(links: list[dict], G) -> tuple:
    """(u, v) of the link between two switches that moved the most bytes."""
    fabric = [(x["bytes"], tuple(x["link"].split("->"))) for x in links]
    fabric = [(b, uv) for b, uv in fabric if b > 0 and all(G.nodes[n].get("role") != "host" for n in uv)]
    if not fabric:
        raise ValueError("no fabric link carried traffic")
    return max(fabric, key=lambda x: x[0])[1]


def link_bytes(links: list[dict], a, b) -> int:
    """Bytes both directions of link a-b moved in a run."""
    return sum(x["bytes"] for x in links if x["link"] in (f"{a}->{b}", f"{b}->{a}"))


def _wrong(result: dict) -> int:
    return sum(r["wrong"] for j in result["jobs"] for r in j["rows"])


def run(rate: float, out_dir, sizes: dict, quiet: bool = False, send_buffer: int | None = None) -> dict:
    """The three checks on one fat-tree replica (root). ``sizes``: bytes for ring, incast (per sender),
    alltoall; ``send_buffer``: ovs-vswitchd's send buffer during each run (``--ovs-send-buffer``)."""
    from testbed import failures as F
    from testbed.collective import placement as P
    from testbed.collective.experiment import fabric_graph, print_report
    from testbed.collective.runner import CollectiveFabric, JobRun
    from testbed.console import data_console

    G = fabric_graph("fat-tree-k4")
    hosts = tuple(P.place(G, 8, "spread"))
    others = {h for p in P.pods(G).values() if hosts[0] not in p for h in p}
    senders = (hosts[0],) + tuple(P.place(G, 7, "spread", within=others))
    ring = ({"collective": "allreduce", "algorithm": "ring", "bytes": sizes["ring"], "chunks": 4},)
    incast = ({"collective": "all_to_all", "bytes": sizes["incast"], "incast": 0, "chunks": 1},)
    a2a = ({"collective": "all_to_all", "bytes": sizes["alltoall"], "chunks": 2},)
    with CollectiveFabric(G, rate, out_dir, name="acceptance", send_buffer=send_buffer) as fab:
        fab.warm(hosts)
        fab.warm(senders)
        bases = [fab.run([JobRun("ring", hosts, runs=ring)], f"ring-baseline-{k}") for k in (1, 2)]
        base = bases[-1]
        a, b = busiest_fabric_link(base["links"], G)
        jb = statistics.fmean(r["jobs"][0]["jct_s"] for r in bases)
        cut_at = round(CUT_AT * jb, 3)
        schedule = f"{cut_at}s:down:{a}-{b}"
        hit = fab.run([JobRun("ring", hosts, runs=ring)], "ring-failure", failures=F.parse(schedule, G))
        inc = fab.run([JobRun("incast", senders, runs=incast, iters=2)], "incast")
        all2all = fab.run([JobRun("alltoall", hosts, runs=a2a)], "alltoall")
    for r in (*bases, hit, inc, all2all):
        r.update(scale=fab.scale, fabric="fat-tree-k4", link_rate_bps=rate)
        print_report(r, quiet)
    jh = hit["jobs"][0]["jct_s"]
    fl = hit["failures"]
    failure = {"schedule": schedule, "link": [a, b], "jct_without_s": round(jb, 4),
               "jct_without_runs_s": [round(r["jobs"][0]["jct_s"], 4) for r in bases], "jct_with_s": round(jh, 4),
               "impact": round(jh / jb, 3), "wrong": sum(_wrong(r) for r in (*bases, hit)),
               "link_bytes_with_failure": link_bytes(hit["links"], a, b),
               "link_bytes_without": link_bytes(base["links"], a, b),
               "cut_at_s": fl["log"][0]["at_s"] if fl["log"] else None,
               "timeouts_inside": fl["timeouts_inside"], "timeouts_outside": fl["timeouts_outside"],
               "retransmissions": hit["jobs"][0]["qp_stats"]["retransmissions"], "restored": fl["restored"]}
    failure["pass"] = failure["wrong"] == 0 and bool(fl["log"]) and not fl["error"]
    fair = fairness(inc["jobs"][0]["rows"][0])
    fair.update(senders=7, hosts=list(senders), bytes_per_sender=sizes["incast"], wrong=_wrong(inc),
                timeouts=inc["jobs"][0]["qp_stats"]["timeouts"])
    row = all2all["jobs"][0]["rows"][0]
    alltoall = {"ranks": 8, "size_bytes": row["size_bytes"], "time_s": round(row["time_s"], 4),
                "busbw_over_link": round(row["busbw_bps"] / rate, 3), "wrong": row["wrong"],
                "timeouts": all2all["jobs"][0]["qp_stats"]["timeouts"], "pass": row["wrong"] == 0}
    verdict = {"link_failure": failure, "incast": fair, "alltoall": alltoall,
               "emulator_ok": all(r["health"]["ok"] for r in (*bases, hit, inc, all2all)),
               "health_reasons": [x for r in (*bases, hit, inc, all2all) for x in r["health"]["reasons"]],
               "load": all2all["health"]["load"]}
    out = data_console(quiet)
    out.print(f"# acceptance (SONiC RoCEv2 plan), k=4 fat-tree, 8 ranks spread, {rate / 1e6:g} Mb/s links")
    out.print(f"#   link failure {a}-{b} at {failure['cut_at_s']}s: JCT {jb:.3f} s -> {jh:.3f} s (x{failure['impact']}), "
              f"#wrong {failure['wrong']}, QP timeouts in/out of the window {failure['timeouts_inside']}/"
              f"{failure['timeouts_outside']}: {'PASS' if failure['pass'] else 'FAIL'}")
    out.print(f"#   7:1 incast {sizes['incast']} B each: per-QP Mb/s {[round(x / 1e6, 3) for x in fair['rates_bps']]}, "
              f"deviation {fair['deviation']:.1%} (< {FAIRNESS_LIMIT:.0%}), #wrong {fair['wrong']}: "
              f"{'PASS' if fair['pass'] else 'FAIL'}")
    out.print(f"#   8-rank all-to-all {row['size_bytes']} B: {row['time_s']:.3f} s, busbw/link {alltoall['busbw_over_link']}, "
              f"#wrong {row['wrong']}, QP timeouts {alltoall['timeouts']}: {'PASS' if alltoall['pass'] else 'FAIL'}")
    return {"runs": {"ring_baseline": bases, "ring_failure": hit, "incast": inc, "alltoall": all2all},
            "verdict": verdict}
