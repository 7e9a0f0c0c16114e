"""From rank reports and port counters to the figures of a run (pure).

    rank-R.json of every rank   -> per (collective, size): time = max(end) - max(start) over ranks per
                                   iteration (one clock: every namespace reads the same wall clock; no
                                   rank can finish before the last one started), averaged like
                                   nccl-tests' "time"; #wrong summed over ranks; algbw/busbw from it
                                   (and each rank's own finish, ``rank_end_s``: who gates it, incast fairness)
    job JCT                     -> first start .. last end of the whole job (every size, every iteration)
    switch port counters        -> bytes per directed link over the run / (seconds x emulated rate)

Real-world figures divide times by the replica's ``scale`` (and multiply rates by it).
"""

from __future__ import annotations

import statistics

from testbed.collective import metrics


def job_rows(reports: list[dict], scale: float) -> list[dict]:
    """nccl-tests rows of one job from its ranks' reports (rank order)."""
    n = len(reports)
    rows = []
    for k, run in enumerate(reports[0]["runs"]):
        per_rank = [rep["runs"][k] for rep in reports]
        times, ends, wrong = [], [], 0
        for it in range(len(run["iterations"])):
            marks = [pr["iterations"][it] for pr in per_rank]
            wrong += sum(m["wrong"] for m in marks)
            if not marks[0]["warmup"]:
                start = max(m["start"] for m in marks)
                times.append(max(m["end"] for m in marks) - start)
                ends.append([m["end"] - start for m in marks])
        t = statistics.fmean(times)
        rows.append(metrics.row(run["collective"], n, run["bytes"], t, scale, wrong,
                                algorithm=run.get("algorithm") or "", chunks=run.get("chunks", 1),
                                skew=run.get("skew", 1.0),
                                iterations=len(times), times_s=times, rank_end_s=ends, incast=run.get("incast"),
                                sent_bytes_max=max(pr["sent_bytes"] for pr in per_rank)))
    return rows


def job_span(reports: list[dict]) -> tuple[float, float]:
    """(start, end) wall-clock of a job: the latest first start, the latest last end."""
    if "trace" in reports[0]:
        return max(r["trace"]["start"] for r in reports), max(r["trace"]["end"] for r in reports)
    start = max(r["runs"][0]["iterations"][0]["start"] for r in reports)
    end = max(r["runs"][-1]["iterations"][-1]["end"] for r in reports)
    return start, end


def trace_summary(reports: list[dict], scale: float) -> dict:
    """Step time per iteration (the latest end of an iteration's ops, from the previous step's end) and
    each op's finish time, offset from the job start."""
    start, end = job_span(reports)
    per_iter: dict = {}
    ops: dict = {}
    wrong = 0
    for r in reports:
        for op in r["trace"]["ops"]:
            per_iter[op["iteration"]] = max(per_iter.get(op["iteration"], 0.0), op["end"])
            key = f"{op['iteration']}.{op['id']}"
            ops.setdefault(key, {})[r["rank"]] = round(op["end"] - start, 6)
            wrong += op["wrong"]
    steps, prev = [], start
    for it in sorted(per_iter):
        steps.append(per_iter[it] - prev)
        prev = per_iter[it]
    return {"step_time_s": steps, "real_step_time_ms": [s / scale * 1e3 for s in steps],
            "total_s": end - start, "ops_finished_s": ops, "wrong": wrong}


def directed_links(plan) -> list[tuple]:
    """(u, v, counter interface, 'tx'|'rx', emulated rate) for both directions of every link with a
    switch end: traffic u -> v is the tx of u's interface when u is a switch, else the rx of v's."""
    out = []
    for e in plan.links:
        rate = e.applied.rate_bps or e.emulated.rate_bps
        hu = plan.graph.nodes[e.u].get("role") == "host"
        hv = plan.graph.nodes[e.v].get("role") == "host"
        if not hu:
            out.append((e.u, e.v, e.intf_u, "tx", rate))
            out.append((e.v, e.u, e.intf_u, "rx", rate))
        elif not hv:
            out.append((e.u, e.v, e.intf_v, "rx", rate))
            out.append((e.v, e.u, e.intf_v, "tx", rate))
    return out


def link_usage(links: list[tuple], before: dict, after: dict, seconds: float, top: int = 0) -> list[dict]:
    """Utilisation of every directed link from interface byte counters ``{(intf, 'tx'|'rx'): bytes}``,
    busiest first: by utilisation (a slow NIC's full link above a fast one carrying more bytes), then bytes."""
    rows = []
    for u, v, intf, way, rate in links:
        moved = after.get((intf, way), 0) - before.get((intf, way), 0)
        util = moved * 8 / seconds / rate if seconds > 0 and rate else 0.0
        rows.append({"link": f"{u}->{v}", "bytes": moved, "utilisation": round(util, 4)})
    rows.sort(key=lambda r: (-r["utilisation"], -r["bytes"]))
    return rows[:top] if top else rows


def nic_gating(hosts: list, nic_bps: dict, links: list[dict], scale: float) -> dict:
    """Who gates a job whose ranks have different NIC rates: every rank's host link, up and down, as
    :func:`link_usage` measured it (bytes over the run / (seconds x that link's emulated rate), so a slow
    NIC's link is judged against its own rate). The gate is the rank whose link was busiest: a ring or a
    tree moves the same bytes through every rank, so the slowest NIC's link fills while the others wait on
    it. ``gate_is_slowest`` says whether the measured gate is a slowest NIC; when it is not, something else
    (a fabric link, the emulator) held the job back. ``nic_bps`` is real; ``scale`` gives the emulated."""
    util = {x["link"]: x["utilisation"] for x in links}
    ranks = []
    for r, h in enumerate(hosts):
        up = max((u for k, u in util.items() if k.startswith(f"{h}->")), default=0.0)
        down = max((u for k, u in util.items() if k.endswith(f"->{h}")), default=0.0)
        ranks.append({"rank": r, "host": h, "nic_bps": nic_bps[h], "emulated_bps": nic_bps[h] / scale,
                      "up_utilisation": up, "down_utilisation": down, "busy": max(up, down)})
    slowest = min(x["nic_bps"] for x in ranks)
    gate = max(ranks, key=lambda x: x["busy"])
    others = [x["busy"] for x in ranks if x is not gate]
    return {"ranks": ranks, "heterogeneous": len({x["nic_bps"] for x in ranks}) > 1, "slowest_nic_bps": slowest,
            "slowest_ranks": [x["rank"] for x in ranks if x["nic_bps"] == slowest], "gate": gate["rank"],
            "gate_host": gate["host"], "gate_utilisation": gate["busy"],
            "others_max_utilisation": max(others, default=0.0), "gate_is_slowest": gate["nic_bps"] == slowest}


def counted_drops(qdisc_json: str, link_json: str, devs=None) -> int:
    """Frames dropped by qdiscs (``tc -s -j qdisc show``) and interfaces (``ip -s -j link show``: rx and
    tx ``dropped``), over ``devs`` (None: every interface but lo)."""
    import json

    def want(dev):
        return dev != "lo" and (devs is None or dev in devs)

    total = 0
    for q in json.loads(qdisc_json or "[]"):
        if want(q.get("dev")) and q.get("root"):    # a root qdisc's drops include its children's
            total += int(q.get("drops", 0))
    for link in json.loads(link_json or "[]"):
        if want(link.get("ifname")):
            st = link.get("stats64") or link.get("stats") or {}
            total += int(st.get("rx", {}).get("dropped", 0)) + int(st.get("tx", {}).get("dropped", 0))
    return total


def loss_ledger(reports: list[dict], counted: int, emulator: dict | None = None, edge: dict | None = None,
                rcvbuf: int = 0) -> dict:
    """Frames the ranks sent that no rank received (all traffic of a run stays between its ranks), set
    against the drops some queue or interface counted, the datagrams the sockets refused (``rcvbuf``: the
    hosts' UDP RcvbufErrors), the frames endpoints discarded, and those the emulator lost inside Open
    vSwitch (``emulator``: :func:`testbed.emu.ovsloss.losses`).

    The counters count every frame, the ranks only theirs: ``edge`` (frames ``in`` and ``out`` of the
    fabric at its host-facing ports over the run) gives the hosts' own frames (ARP, IPv6) that were lost,
    ``others_lost``, which are taken off what the counters name (a rank's frame dropped in its own host's
    queue makes it fewer: the ledger then shows ``beyond``). ``beyond``: frames the counters name beyond
    those lost (0 when the ledger balances or falls short)."""
    tx = sum(r["stats"]["tx_packets"] for r in reports)
    rx = sum(r["stats"]["rx_packets"] for r in reports)
    dev = [r["stats"]["device"] for r in reports]
    enobufs = sum(d.get("tx_enobufs", 0) for d in dev)
    discarded = sum(d.get("rx_unknown_qp", 0) + d.get("rx_icrc_bad", 0) + d.get("rx_malformed", 0) for d in dev)
    inside = sum(max(0, v) for v in (emulator or {}).values())   # floods make an inference negative
    others = max(0, (edge["in"] - (tx - enobufs)) - (edge["out"] - (rx + discarded + rcvbuf))) if edge else 0
    lost = max(0, tx - rx)
    named = counted + enobufs + rcvbuf + discarded + inside - others
    return {"sent": tx, "received": rx, "lost": lost, "counted_drops": counted, "socket_enobufs": enobufs,
            "udp_rcvbuf_errors": rcvbuf, "endpoint_discards": discarded, "emulator": dict(emulator or {}),
            "emulator_lost": inside, "others_lost": others, "unattributed": max(0, lost - named),
            "beyond": max(0, named - lost)}


def inside_emulator(emulator: dict, others: int, names: dict) -> tuple[int, str | None]:
    """(the ranks' frames lost inside the emulator, the reason that says so, None when none): the entries of
    ``emulator`` (``names``: how to say each), less ``others``, the hosts' own frames lost (IPv6 multicast
    the controller's table-miss rule drops: the fabric's policy, not the emulator's)."""
    inside = {k: v for k, v in emulator.items() if v > 0}
    frames = max(0, sum(inside.values()) - others)
    if not frames:
        return 0, None
    less = f" (less {others} of the hosts' own frames)" if others else ""
    return frames, (f"{frames} frames lost inside the emulator: "
                    + ", ".join(f"{v} {names[k]}" for k, v in inside.items()) + less)


def ovs_port_drops(dpctl_text: str, intfs) -> int:
    """Drops the userspace datapath counted on ``intfs`` (``ovs-appctl dpctl/show -s``: live, unlike the
    OVSDB statistics column, refreshed every few seconds): RX dropped + overruns, TX dropped."""
    import re

    total, port = 0, None
    for line in (dpctl_text or "").splitlines():
        m = re.match(r"\s*port \d+: (\S+)", line)
        if m:
            port = m.group(1)
            continue
        if port in intfs:
            for key in ("dropped", "overruns"):
                for v in re.findall(rf"\b{key}:(\d+)", line):
                    total += int(v)
    return total


def upcalls_lost(dpctl_text: str) -> int:
    """``lost:`` of ``ovs-appctl dpctl/show`` (packets the datapath dropped on the way to the slow path)."""
    import re

    return sum(int(m) for m in re.findall(r"\blost:(\d+)", dpctl_text or ""))
