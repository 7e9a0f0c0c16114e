"""``testbed validate [--quick] [--json]``: the replica against independent references, as one table.

    reference                       metric                               replica  reference  error  pass  backends
    DCQCN fluid model (CoNEXT'16)   rate trajectory, 2 flows (RMS / C)   ...
    DCQCN discrete simulation       the same metrics, against 20 seeded packet-level runs
    ideal link                      one-way delay, delivered rate, gaps  ...
    RED curve (configured)          marked share on the ramp             ...
    min(rate, window/RTT)           single-flow goodput                  ...
    physics / fluid gain            from a long-haul results folder (--long-haul DIR)

References are computed from published equations and algorithms (the fluid model, a discrete DCQCN
simulation, the ideal link, the RED curve, min(rate, window/RTT), 5 us/km), never from the code under
test. The table goes to stdout (JSON with ``--json``), a plot per row and ``validate.json`` into the
results folder. Exit status 1 when a measured row
fails; rows without input (no ``--long-haul``) are listed as missing and do not count.

Seeds: one run seed (``--seed N``, else drawn from the OS) and, derived from it with
:func:`testbed.seeds.derive`, one delay-line seed per experiment (:func:`link_seeds`), so each experiment
and each repetition of the command draws its own RED marks; ``validate.json`` records the run seed and
each experiment's link seed with its first CNP and first rate cut, and ``--seed N`` repeats the draws.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import replace
from pathlib import Path

from testbed.console import console, require_root
from testbed.emu.cpustat import load_average
from testbed.errors import SpecError
from testbed.seeds import SEED_LIMIT, derive, draw

GROUPS = ("dcqcn", "link", "red", "goodput", "long-haul")


def register(sub) -> None:
    parser = sub.add_parser("validate", help="alignment table: replica vs fluid model, ideal link, RED, physics",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer cases (a few minutes)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--out", metavar="DIR", help="results folder (default results/validate/<timestamp>)")
    parser.add_argument("--rows", default=",".join(GROUPS), help=f"row groups to run: {', '.join(GROUPS)}")
    parser.add_argument("--long-haul", metavar="DIR", nargs="+",
                        help="'testbed run long_haul_cnp' results folders for the physics and gain rows (several: "
                             "e.g. one run per distance, merged; they must share the flows and scale)")
    parser.add_argument("--seed", type=_seed, metavar="N",
                        help="run seed the delay lines' seeds derive from (default: drawn and recorded; "
                             "the recorded seed repeats a run's RED draws)")
    parser.set_defaults(func=run)


def plan(quick: bool) -> dict:
    """What to run (pure): real-world DCQCN experiments and emulated goodput cases."""
    from testbed.validate.replica import DcqcnRun

    # NIC-like senders: the window (2048 packets) exceeds 2 x (BDP + buffer), so only DCQCN limits them
    two = DcqcnRun(kmax_pkts=300, pmax=0.2, limit_pkts=1000, starts_s=(0.0, 0.05), duration_s=0.6, window=2048)
    dcqcn = [two] if quick else [replace(two, duration_s=1.0),
                                 replace(two, starts_s=(0.0, 0.05, 0.1, 0.15), duration_s=0.8)]
    # window-limited with a long-haul RTT (100 ms emulated), so per-packet endpoint costs stay small beside it
    goodput = [{"rate_bps": 50e6, "one_way_s": 0.050, "window": 32, "seconds": 4.0 if quick else 8.0},
               {"rate_bps": 10e6, "one_way_s": 0.002, "window": 128, "seconds": 3.0 if quick else 6.0}]
    # backlogged gap checks at rates a loaded 2-core machine forwards (the bench goes to 200 Mb/s)
    gap_rates = (10e6, 20e6) if quick else (10e6, 50e6, 100e6, 200e6)
    return {"dcqcn": dcqcn, "goodput": goodput, "gap_rates_bps": gap_rates}


def _seed(text: str) -> int:
    """argparse ``type=`` for ``--seed``: an integer in 0..2^31-1."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be 0..{SEED_LIMIT - 1}, got {text!r}")
    return value


def link_seeds(seed: int, p: dict) -> dict:
    """The delay-line seed of every experiment of plan ``p`` (pure), derived from the run seed by label:
    ``{"dcqcn": [...], "goodput": [...], "gaps": [...], "red": n}`` in the plan's order (the RED case is
    one experiment: its marks are the draws a seed decides)."""
    return {"dcqcn": [derive(seed, f"dcqcn{i}") for i in range(len(p["dcqcn"]))],
            "goodput": [derive(seed, f"goodput{i}") for i in range(len(p["goodput"]))],
            "gaps": [derive(seed, f"gaps{r:g}") for r in p["gap_rates_bps"]],
            "red": derive(seed, "red")}


def _groups(text: str) -> list[str]:
    groups = [g.strip() for g in text.split(",") if g.strip()]
    bad = [g for g in groups if g not in GROUPS]
    if bad or not groups:
        raise SpecError("--rows", f"unknown group {bad[0] if bad else text!r}; allowed: {', '.join(GROUPS)}")
    return groups


def run(args) -> int:
    from testbed.scenario import Results

    groups = _groups(args.rows)
    replica_groups = [g for g in groups if g != "long-haul"]
    long_haul = None
    if "long-haul" in groups and args.long_haul:
        from testbed.validate.longhaul import load_all

        long_haul = load_all(args.long_haul)
    if replica_groups:
        require_root("testbed validate")
    p = plan(args.quick)
    seed = draw() if args.seed is None else args.seed
    seeds = link_seeds(seed, p)
    started = time.monotonic()
    with Results("validate", args, {"groups": groups, "quick": args.quick, "seed": seed, "link_seeds": seeds,
                                    "dcqcn": [vars(r) for r in p["dcqcn"]], "goodput": p["goodput"]}) as res:
        if replica_groups:
            console.print(f"seed {seed} (link seeds derived from it; --seed {seed} repeats these draws)")
        raw, health = _measure(replica_groups, p, res.dir, args.quick, seeds) if replica_groups else ({}, {})
        raw["seed"] = seed
        res.write_json("raw.json", raw)
        rows = _rows(groups, p, raw, long_haul)
        for row in rows:   # name the delay line's core: "userspace (c)" or "userspace (python)"
            row.backends = tuple(f"userspace ({raw['core']})" if b == "userspace" and raw.get("core") else b
                                 for b in row.backends)
        doc = _document(rows, res.dir, health, args, time.monotonic() - started)
        doc["seed"] = seed
        doc["experiments"] = _experiments(p, raw)
        res.write_json("validate.json", doc)
        if not args.json:
            if long_haul is not None:   # the trials the long-haul rows read, one line per point
                from testbed.validate import longhaul_report as report
                from testbed.validate.longhaul import judged

                groups = report.summarise(judged(long_haul))
                report.print_summary(groups, console)
                report.print_fct_classes(groups, console)
            _print(doc)
        res.finish(doc)   # summary.json, the JSON on stdout with --json, status.json "ok": the run completed
    return 0 if doc["all_passed"] else 1


def _measure(groups: list, p: dict, out: Path, quick: bool, seeds: dict) -> tuple[dict, dict]:
    """Run the replica experiments on one wire, each with its delay-line seed of ``seeds``
    (:func:`link_seeds`), under the machine-wide lock (root glue)."""
    from testbed.emu.registry import RunRegistry
    from testbed.validate import replica

    raw: dict = {"dcqcn": [], "goodput": []}
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    from testbed.links.core import selected_core

    core, detail = selected_core()
    console.print(f"link core {core}: {detail}")
    raw["core"] = core
    with RunRegistry("validate") as reg:
        wire = replica.open_validation_wire(reg, work)
        if "link" in groups or "red" in groups:
            console.print("link: delay, gaps, RED (testbed bench link cases)")
            raw["link"] = replica.run_link(wire, quick, p["gap_rates_bps"], core, gap_seeds=seeds["gaps"],
                                          red_seed=seeds["red"])
        if "dcqcn" in groups:
            for i, (r, seed) in enumerate(zip(p["dcqcn"], seeds["dcqcn"], strict=True)):
                console.print(f"DCQCN: {len(r.starts_s)} flows, {r.duration_s * 1e3:g} ms real at scale {r.scale:g}, "
                              f"link seed {seed}")
                d = work / f"dcqcn{i}"
                d.mkdir(exist_ok=True)
                raw["dcqcn"].append(replica.run_dcqcn(wire, d, r, core, seed=seed))
        if "goodput" in groups:
            for c, seed in zip(p["goodput"], seeds["goodput"], strict=True):
                console.print(f"goodput: {c['rate_bps'] / 1e6:g} Mb/s, window {c['window']}, link seed {seed}")
                res = replica.run_goodput(wire, work, c["rate_bps"], c["one_way_s"], c["window"], c["seconds"], core,
                                          seed=seed)
                raw["goodput"].append({**c, **res})
        wire.stop()
    return raw, _health(raw, p)


def _late(stats: dict, one_way_s: float) -> dict:
    """Delay-line lateness of one run; it counts (as in the long-haul scenario) only when more than 1% of
    frames were late by more than 2% of the emulated one-way delay on average."""
    sent = stats.get("tx_packets") or stats.get("forwarded_packets") or 0
    share = (stats.get("emulator_late") or 0) / max(1, sent)
    mean = stats.get("mean_late_lateness_s") or 0.0
    return {"late_share": round(share, 4), "mean_late_ms": round(mean * 1e3, 3),
            "late": bool(share > 0.01 and mean > 0.02 * one_way_s)}


def _health(raw: dict, p: dict) -> dict:
    """Emulator health of every replica run: delay-line lateness, kernel drops, machine load."""
    runs = []
    for r, d in zip(p["dcqcn"], raw.get("dcqcn", []), strict=False):
        runs.append({"run": "dcqcn", "link_seed": d.get("link_seed"), **_late(d["link_stats"], r.one_way_s * r.scale),
                     "rx_kernel_drops": d.get("rx_kernel_drops"), "realtime": d.get("realtime"),
                     "retransmissions": sum(s["retransmissions"] for s in d["senders"])})
    for g in raw.get("goodput", []):
        runs.append({"run": f"goodput {g['rate_bps'] / 1e6:g}M", "link_seed": g.get("link_seed"),
                     **_late(g["link_stats"], g["one_way_s"])})
    link = raw.get("link")
    if link:
        for c in link["delay_cases"] + link["gap_captures"]:
            name = f"delay {c['delay_ms']:g}ms" if "delay_ms" in c else f"gaps {c['rate_bps'] / 1e6:g}M"
            seed = {"link_seed": c["link_seed"]} if "link_seed" in c else {}   # the delay cases keep bench's
            runs.append({"run": name, **seed, "emulator_late": c.get("emulator_late"),
                         "rx_kernel_drops": c.get("rx_kernel_drops")})
    healthy = all(not r.get("late") and not r.get("rx_kernel_drops") for r in runs)
    return {"healthy": healthy, "runs": runs, "load_average": load_average(), "cpus": os.cpu_count()}


def _rows(groups: list, p: dict, raw: dict, long_haul: dict | None) -> list:
    from testbed.validate import rows as R
    from testbed.validate.replica import FRAME_BYTES

    out = []
    if "dcqcn" in groups:
        from testbed.validate.discrete import discrete_rows, discrete_runs, fluid_scope

        for r, d in zip(p["dcqcn"], raw["dcqcn"], strict=True):
            runs = discrete_runs(r, FRAME_BYTES)
            rows = fluid_scope(R.dcqcn_rows(d, r, FRAME_BYTES), r, FRAME_BYTES, runs) + \
                discrete_rows(d, r, FRAME_BYTES, runs=runs)
            for row in rows if d.get("link_seed") is not None else ():
                row.note = "; ".join(filter(None, (row.note, f"link seed {d['link_seed']}")))
            out += rows
    if "link" in groups:
        link = raw["link"]
        gaps = [R.gap_case_summary(g["rate_bps"], g["arrivals_ns"], link["frame"], offered_bps=g.get("offered_bps"),
                                   source=g.get("source")) for g in link["gap_captures"]]
        out += R.link_rows(link["delay_cases"], gaps)
    if "red" in groups:
        out += R.red_rows(raw["link"]["red"])
    if "goodput" in groups:
        out += R.goodput_rows(raw["goodput"])
    if "long-haul" in groups:
        if long_haul is None:
            for metric in ("ECN feedback >= physics bound", "feedback saved by fast CNP",
                           "goodput ratio fast/ECN vs distance"):
                out.append(R.skipped_row("physics / fluid gain (long haul)", metric,
                                         "needs --long-haul DIR (a long_haul_cnp results folder)"))
        else:
            from testbed.validate.longhaul import long_haul_rows

            out += long_haul_rows(long_haul)
    return out


def _experiments(p: dict, raw: dict) -> list[dict]:
    """Each DCQCN experiment's link seed beside what its draws decided: first CNP and first rate cut."""
    from testbed.validate.rows import onset

    return [{"run": "dcqcn", "flows": len(r.starts_s), "duration_ms": round(r.duration_s * 1e3, 3),
             "link_seed": d.get("link_seed"), **onset(d, r)}
            for r, d in zip(p["dcqcn"], raw.get("dcqcn", []), strict=False)]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def _plot(i: int, row, folder: Path) -> str | None:
    from testbed.validate import plots

    name = folder / f"{i:02d}-{_slug(row.metric)}.png"
    if row.kind == "trajectory" and "model_rates" in row.plot:
        return str(plots.plot_dcqcn(row.plot, name))
    if "errors" in row.plot:
        return str(plots.plot_ccdf(row.plot["errors"], name, row.metric))
    if "bins" in row.plot:
        return str(plots.plot_red(row.plot["bins"], row.plot["red"], name))
    if row.replica is not None and row.expected is not None and row.kind in ("scalar", "bound"):
        return str(plots.plot_bars(row.metric, row.replica, row.expected, row.unit, name))
    return None


def _document(rows: list, folder: Path, health: dict, args, seconds: float) -> dict:
    from testbed.validate.longhaul import gain_points
    from testbed.validate.plots import plot_gain_vs_distance

    plots = folder / "plots"
    docs = []
    shared = {}
    for i, row in enumerate(rows):
        doc = row.to_json()
        key = id(row.plot) if row.plot else None
        if key in shared:
            doc["plot"] = shared[key]
        else:
            doc["plot"] = _plot(i, row, plots)
            if key is not None:
                shared[key] = doc["plot"]
        docs.append(doc)
    for case, points in gain_points(rows).items():
        path = plot_gain_vs_distance(points, plots / f"gain-vs-distance-{case}.png",
                                     predicted=[{"distance_km": p["distance_km"], "gain": p["predicted"]}
                                                for p in points], title=f"fast CNP gain over ECN, {case}",
                                     steady=[{"distance_km": p["distance_km"], "gain": p["steady_state"]}
                                             for p in points if "steady_state" in p],
                                     discrete=[{"distance_km": p["distance_km"], "gain": p["discrete"],
                                                "low": p["discrete_low"], "high": p["discrete_high"]}
                                               for p in points if "discrete" in p])
        for d in docs:
            if d["metric"].startswith(case) and "goodput ratio" in d["metric"]:
                d["plot"] = str(path)
    measured = [d for d in docs if d["kind"] not in ("missing", "info") and not d["scope"]]
    return {"rows": docs, "passed": sum(d["passed"] for d in measured), "measured": len(measured),
            "missing": sum(d["kind"] == "missing" for d in docs), "out_of_scope": sum(bool(d["scope"]) for d in docs),
            # rows measured on an unhealthy emulator are shown, but the run is not a pass
            "all_passed": all(d["passed"] for d in measured) and health.get("healthy", True),
            "health": health, "quick": args.quick, "seconds": round(seconds, 1)}


def _fmt(v, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _print(doc: dict) -> None:
    from rich.table import Table

    from testbed.console import out
    t = Table(title="testbed validate: replica vs independent references")
    for col in ("reference", "metric", "replica", "reference value", "unit", "error", "tol.", "pass", "backends"):
        t.add_column(col)
    for r in doc["rows"]:
        verdict = "missing" if r["kind"] == "missing" else ("info" if r["kind"] == "info" else
                                                             "scope" if r["scope"] else ("yes" if r["passed"] else "NO"))
        err = "-" if r["error"] is None else f"{r['error'] * 100:.1f}%"
        t.add_row(r["reference"], r["metric"], _fmt(r["replica"]), _fmt(r["expected"]), r["unit"], err,
                  f"{r['tolerance'] * 100:.3g}%", verdict, ",".join(r["backends"]))
    out.print(t)
    h = doc["health"]
    emulator = (f"emulator {'healthy' if h.get('healthy', True) else 'UNHEALTHY'}; load {h.get('load_average')}"
                if h else "no replica runs here (the long-haul rows read stored trials, valid ones only)")
    out.print(f"{doc['passed']}/{doc['measured']} measured rows pass, {doc['missing']} missing, "
              f"{doc['out_of_scope']} out of their reference's scope (shown, not counted: see the notes); "
              f"{emulator}; {doc['seconds']} s")
    if h:   # the seed decides the replica runs' draws only
        out.print(f"seed {doc.get('seed')}" + "".join(
            f"; DCQCN {e['flows']} flows: link seed {e['link_seed']}, first CNP {e['first_cnp_real_ms']} ms, "
            f"first cut {e['first_cut_real_ms']} ms (real)" for e in doc.get("experiments", [])))
    for r in doc["rows"]:
        if r["note"] or r["scope"]:
            console.print(f"  {r['metric']}: {'; '.join(filter(None, (r['scope'], r['note'])))}", markup=False)
