"""Alignment rows from the long-haul experiment's results (pure): feedback-delay physics and the fast-CNP gain
against the fluid model. The scenario produces the trials; this module only reads them.

Input: a results folder of ``testbed run long_haul_cnp`` (``config.json`` + ``rows.json``) or the same two
documents as one dict ``{"config": {...}, "rows": [...]}``. Fields read (docs/validation.md lists them):

    config.config: scale, frame_bytes, line_rate_bps, message_bytes, messages_per_sender,
                   local_fibre_m (optional, default 0)
    each row:      case, distance_km, mode, repetition, throughput_mbps (real), feedback_delay_ms (real),
                   switch_cnps, cnps_at_senders | cnps_rx, marks, unaccounted_losses, saturation,
                   bottleneck: {real_rate_bps, kmin_bytes, kmax_bytes, pmax, flows (that cross it)}

Every row is checked with :func:`testbed.validate.trials.trial_validity` first, including its feedback
delay's excess over physics (:func:`testbed.validate.trials.feedback_check`, recomputed here from the row
and the config); invalid trials are counted and left out, never averaged in. The excess rows alone read
the trials that are valid but for that excess: they say how far the emulator's transit went.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

from testbed.errors import SpecError
from testbed.models.dcqcn_fluid import FluidParams
from testbed.validate.rows import SCALAR_TOLERANCE, Row, mark_scope, scalar_row, skipped_row
from testbed.validate.stats import confidence_interval, relative_error
from testbed.validate.trials import (
    discrete_flow_goodputs,
    feedback_bound_s,
    feedback_check,
    feedback_paths_m,
    flow_goodput,
    nearest_rank,
    predicted_gain,
    propagation_s,
    trial_validity,
    wire_bytes,
)
from testbed.validate.trials import feedback_serialisation_s as _ser

REF_PHYSICS = "physics (5 us/km + serialisation)"
REF_GAIN = "DCQCN fluid model, feedback shortened"
REF_GAIN_DISCRETE = "DCQCN discrete simulation, feedback shortened"
ROW_FIELDS = ("case", "distance_km", "mode", "throughput_mbps", "feedback_delay_ms")


def load(path: Path) -> dict:
    """``{"config", "rows"}`` from a results folder or a JSON file holding both."""
    path = Path(path)
    try:
        if path.is_dir():
            config = json.loads((path / "config.json").read_text()).get("config", {})
            rows = json.loads((path / "rows.json").read_text())
            from testbed.validate.longhaul_captures import reread_feedback  # lazy: it imports the planner

            return {"config": config, "rows": rows, "reread": reread_feedback(path, config, rows)}
        doc = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise SpecError("--long-haul", f"{exc.filename} does not exist; give a long_haul_cnp results folder") from None
    except json.JSONDecodeError as exc:
        raise SpecError("--long-haul", f"{path}: not JSON ({exc.msg})") from None
    if not isinstance(doc, dict) or "rows" not in doc:
        raise SpecError("--long-haul", f"{path}: expected {{'config': ..., 'rows': [...]}}")
    return {"config": doc.get("config", {}), "rows": doc["rows"]}


#: what the models of a run depend on: folders merged by :func:`load_all` must agree on these
SHARED_CONFIG = ("scale", "frame_bytes", "ib_mtu", "line_rate_bps", "message_bytes", "message_sizes",
                 "messages_per_sender", "incast", "local_fibre_m", "local_feedback_s", "red.rule", "serialise")
#: the value of a key a run's config.json lacks: runs before 2026-12-05 handed frames over unserialised
CONFIG_DEFAULTS = {"serialise": False}


def _config_value(config: dict, key: str):
    """``config[key]``, a dotted key read one level down (the RED block's thresholds follow each distance's
    RTT under the BDP rule; its rule is what runs must share)."""
    head, _, tail = key.partition(".")
    value = config.get(head, CONFIG_DEFAULTS.get(head))
    return (value or {}).get(tail) if tail else value


def load_all(paths) -> dict:
    """:func:`load` of several results folders (e.g. one run per distance), merged into one document.

    Why refuse rather than merge anything: the gain rows pair trials by repetition within a case, distance and
    mode, and model them with one run's configuration; two runs of the same point, or runs of different
    flows, would be paired or modelled wrongly. Errors name ``--long-haul`` and the field that differs."""
    docs = [(Path(p), load(Path(p))) for p in paths]
    first_path, merged = docs[0][0], {"config": dict(docs[0][1]["config"]), "rows": [], "reread": []}
    seen: dict = {}
    for path, doc in docs:
        for k in SHARED_CONFIG:
            mine, theirs = _config_value(doc["config"], k), _config_value(merged["config"], k)
            if mine != theirs:
                raise SpecError("--long-haul", f"{path}: config.{k} is {mine!r} where {first_path} has {theirs!r}; "
                                               "give folders of one experiment")
        for r in doc["rows"]:
            key = (r.get("case"), r.get("distance_km"), r.get("mode"), r.get("repetition"))
            if key in seen and seen[key] != path:
                raise SpecError("--long-haul", f"{path} and {seen[key]} both hold {key[0]} {key[1]} km {key[2]} "
                                               f"repetition {key[3]}; give one run per point")
            seen[key] = path
        merged["rows"] += doc["rows"]
        merged["reread"] += doc.get("reread", [])
    return merged


def _check(rows: list) -> None:
    for i, r in enumerate(rows):
        missing = [f for f in ROW_FIELDS if f not in r]
        if missing:
            raise SpecError(f"rows[{i}].{missing[0]}", "missing; the long-haul scenario must emit it "
                                                       "(see docs/validation.md)")


def _feedback_check(config: dict, r: dict) -> dict | None:
    fb = r.get("feedback_delay_ms")
    return feedback_check(r["case"], float(r["distance_km"]) * 1e3, r["mode"], None if fb is None else fb / 1e3,
                          float(config.get("local_fibre_m", 0.0)), _rate(config, r), _frame(config))


def _verdict(config: dict, r: dict, physics: bool = True) -> dict:
    """:func:`trial_validity` of one row, its feedback check recomputed from the row and the config
    (``physics=False``: the feedback excess is not judged)."""
    return trial_validity({**r, "cnps_rx": r.get("cnps_rx", r.get("cnps_at_senders")),
                           "feedback_check": _feedback_check(config, r) if physics else None})


def _valid(rows: list, config: dict, physics: bool = True) -> tuple[list, list]:
    """(valid rows, [(invalid row, reasons)]); ``physics=False``: the feedback excess is not judged."""
    good, bad = [], []
    for r in rows:
        v = _verdict(config, r, physics)
        (good if v["valid"] else bad).append((r, v["reasons"]))
    return [r for r, _ in good], bad


def judged(doc: dict) -> list[dict]:
    """The rows with ``valid`` and ``validity`` as validate judges them (:func:`_verdict`, after :func:`load`
    read the captures again): what a summary of these trials shows."""
    out = []
    for r in doc["rows"]:
        v = _verdict(doc["config"], r)
        out.append({**r, "valid": v["valid"], "validity": v})
    return out


def _groups(rows: list) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault((r["case"], float(r["distance_km"]), r["mode"]), []).append(r)
    return out


def _rate(config: dict, row: dict) -> float | None:
    """The bottleneck's real rate (the line rate in results that predate the bottleneck block)."""
    return (row.get("bottleneck") or {}).get("real_rate_bps") or config.get("line_rate_bps")


def _frame(config: dict) -> int:
    return int(config.get("frame_bytes", 1082))


def _serialisation(config: dict, row: dict, mode: str = "ecn") -> float:
    return _ser(_rate(config, row), _frame(config), mode)


def long_haul_rows(doc: dict, model_duration_s: float | None = None, discrete_seeds: int = 10) -> list[Row]:
    """Physics and gain rows from the long-haul trials (see the module docstring for the fields).

    Args:
        model_duration_s: simulated time of each fluid run (default: :func:`predicted_gain`'s).
        discrete_seeds: runs per trial of the discrete simulation of the same flows, for the gain rows
            against it (0: none; each seed costs one discrete run per valid trial).
    """
    config, rows = doc["config"], doc["rows"]
    _check(rows)
    valid, invalid = _valid(rows, config)
    out: list[Row] = []
    if invalid:
        out.append(Row("trial validity", "invalid trials left out", float(len(invalid)), 0.0, "trials", None,
                       SCALAR_TOLERANCE, True, (), "info",
                       "; ".join(sorted({reason for _, rs in invalid for reason in rs}))[:300]))
    if doc.get("reread"):
        out.append(Row("trial captures", "feedback delays read again from the captures", float(len(doc["reread"])),
                       0.0, "trials", None, SCALAR_TOLERANCE, True, (), "info",
                       "changed since the run (the reading was fixed; the captures are the record): "
                       + "; ".join(doc["reread"])[:300]))
    groups = _groups(valid)
    local = float(config.get("local_fibre_m", 0.0))
    backends = tuple(config.get("backends", ("bmv2", "userspace")))
    for (case, km, mode), trials in sorted(groups.items()):
        delays = [t["feedback_delay_ms"] / 1e3 for t in trials if t.get("feedback_delay_ms") is not None]
        if not delays or mode != "ecn":
            continue
        bound = feedback_bound_s(feedback_paths_m(case, km * 1e3, local)["ecn"], _serialisation(config, trials[0]))
        ci = confidence_interval(delays)
        ok = min(delays) >= bound * 0.99
        out.append(Row(REF_PHYSICS, f"{case} {km:g} km: ECN feedback >= bound", ci.mean * 1e3, bound * 1e3,
                       "ms (real)", (ci.mean - bound) / bound if bound else None, 0.0, ok, backends, "bound",
                       f"{len(delays)} valid trials; min {min(delays) * 1e3:.4f} ms"))
    for (case, km, mode), trials in sorted(groups.items()):
        if mode != "fast-cnp" or (case, km, "ecn") not in groups:
            continue
        fast = [t["feedback_delay_ms"] / 1e3 for t in trials if t.get("feedback_delay_ms") is not None]
        ecn = [t["feedback_delay_ms"] / 1e3 for t in groups[(case, km, "ecn")] if t.get("feedback_delay_ms") is not None]
        paths = feedback_paths_m(case, km * 1e3, local)
        saved = propagation_s(paths["ecn"] - paths["fast-cnp"])
        if not fast or not ecn:
            continue
        measured = confidence_interval(ecn).mean - confidence_interval(fast).mean
        if saved <= 0 or km == 0:
            continue
        out.append(scalar_row(REF_PHYSICS, f"{case} {km:g} km: feedback saved by fast CNP", measured * 1e3,
                              saved * 1e3, "ms (real)", backends=backends,
                              note=f"ECN {len(ecn)}, fast CNP {len(fast)} valid trials"))
    out += _excess_rows(config, _groups(_valid(rows, config, physics=False)[0]), backends)
    out += _gain_rows(config, groups, backends, model_duration_s, discrete_seeds)
    return out


def _excess_rows(config: dict, groups: dict, backends) -> list[Row]:
    """Per case, distance and mode: the feedback delay beyond its physics bound, i.e. the emulator's transit
    (BMv2 hops, host scheduling, the delay line), over the trials valid but for it, against what
    :func:`feedback_check` allows. A failing row says the replica cannot resolve feedback delays at that
    distance (its own transit is of their size); its trials over the allowance are left out of every other
    row."""
    out = []
    scale = float(config.get("scale") or 1.0)
    for (case, km, mode), trials in sorted(groups.items()):
        checks = [c for c in (_feedback_check(config, t) for t in trials) if c is not None]
        if not checks:
            continue
        worst = max(checks, key=lambda c: c["excess_us"])
        loop = worst["loop_us"]
        over = sum(not c["ok"] for c in checks)
        mean = sum(c["excess_us"] for c in checks) / len(checks)
        out.append(Row(REF_PHYSICS, f"{case} {km:g} km: {mode} feedback excess over physics",
                       worst["excess_us"] / 1e3, 0.0, "ms (real)", worst["excess_us"] / loop if loop else None,
                       worst["allowance_us"] / loop if loop else 0.0, worst["ok"], backends, "bound",
                       f"the emulator's transit on the feedback path, worst of {len(checks)} trials "
                       f"(mean {mean:.1f} us real, {worst['excess_us'] * scale / 1e3:.1f} ms emulated worst; "
                       f"{over} over the allowance, left out); may be {worst['allowance_us']:.1f} us"))
    return out


def _paired_gain(ecn: list, fast: list, value=lambda t: t["throughput_mbps"]) -> list[float]:
    """Per-repetition gains (fast / ecn - 1) paired by repetition index; unpaired: every fast vs the ECN mean.
    ``value``: a trial's goodput (the replica's measured one by default; a model's for the same trial)."""
    by_rep = {t.get("repetition"): value(t) for t in ecn}
    if all(t.get("repetition") in by_rep for t in fast) and None not in by_rep:
        return [value(t) / by_rep[t["repetition"]] - 1 for t in fast if by_rep[t["repetition"]] > 0]
    mean = sum(value(t) for t in ecn) / len(ecn)
    return [value(t) / mean - 1 for t in fast] if mean > 0 else []


def _starts_s(trial: dict, flows: int) -> tuple | None:
    """The flows' start times (s, real) the trial had (``start_offsets_us`` of its first ``flows`` senders, the
    ones crossing the congestion point); None when the trial does not record them (older results)."""
    off = trial.get("start_offsets_us")
    if not off or len(off) < flows or any(o is None for o in off[:flows]):
        return None
    first = [float(o) for o in off[:flows]]
    return tuple((o - min(first)) / 1e6 for o in first)


def _gain_rows(config: dict, groups: dict, backends, duration_s: float | None, seeds: int = 0) -> list[Row]:
    """Fast CNP's measured goodput ratio over ECN against two models of the same flows (finite messages, the
    flows that cross the congestion point), each run per trial with the start offsets that trial's senders
    had and paired by repetition as the replica's trials are:

    * the fluid model (the issue's reference; the paper's steady-state gain for long flows beside it);
    * with ``seeds``, the discrete simulation, ``seeds`` runs per trial: the reference is the median over
      seeds of the paired mean, and the tolerance the wider of 10 % and that mean's own 5-95 % range.

    Why both (docs/validation.md, "The 100 km mix, read from the timelines"): a few MB is over in a few round
    trips, so goodput is set by how deep the first discrete cuts go; at 100 km the fluid model jumps with a
    few us of start phase (1.36-2.15 over the offsets the trials had), a mean field no single realisation
    follows. The discrete process is what a replica trial realises; its spread is the row's honest width."""
    out: list[Row] = []
    cases = sorted({c for c, _, _ in groups})
    for case in cases:
        kms = sorted({km for c, km, _ in groups if c == case and (c, km, "ecn") in groups
                      and (c, km, "fast-cnp") in groups})
        for km in kms:
            out += _gain_point(config, case, km, groups[(case, km, "ecn")], groups[(case, km, "fast-cnp")],
                               backends, duration_s, seeds)
    return out


def _gain_point(config: dict, case: str, km: float, ecn: list, fast: list, backends, duration_s: float | None,
                seeds: int) -> list[Row]:
    """:func:`_gain_rows` at one case and distance (its valid ECN and fast-CNP trials)."""
    out: list[Row] = []
    local = float(config.get("local_fibre_m", 0.0))
    gains = _paired_gain(ecn, fast)
    if not gains:
        return out
    metric = f"{case} {km:g} km: goodput ratio fast/ECN"
    b = fast[0].get("bottleneck") or {}
    needed = ("real_rate_bps", "kmin_bytes", "kmax_bytes", "pmax", "flows")
    missing = [f"bottleneck.{k}" for k in needed if k not in b] + \
              [f"config.{k}" for k in ("line_rate_bps", "message_bytes", "messages_per_sender") if k not in config]
    if missing:
        out.append(skipped_row(REF_GAIN, metric, "trial lacks " + ", ".join(missing)
                               + " (rerun the scenario: older results do not record them)"))
        return out
    flows, messages = int(b["flows"]), int(config["messages_per_sender"])
    base = FluidParams(capacity_bps=b["real_rate_bps"], line_rate_bps=config["line_rate_bps"],
                       packet_bytes=config.get("frame_bytes", 1082), kmin_bytes=b["kmin_bytes"],
                       kmax_bytes=b["kmax_bytes"], pmax=b["pmax"],
                       feedback_delay_s=config.get("local_feedback_s", 5e-6),
                       starts_s=(0.0,) * flows, rate_ai_bps=config["line_rate_bps"] * 4e-4,
                       min_rate_bps=config["line_rate_bps"] * 1e-3, queue_delay=True)
    rtt = 2 * propagation_s(km * 1e3 + 2 * local)
    from testbed.validate.longhaul_setup import message_sizes  # lazy: it imports the planner
    sizes = [int(x) for x in config.get("message_sizes") or [config["message_bytes"]]]
    mix = tuple(tuple(message_sizes(sizes, messages, i)) for i in range(flows))   # as the senders sent
    payload = float(sum(map(sum, mix)))
    mtu = config.get("ib_mtu")   # the frames the senders sent (results without it: the payload alone)
    if mtu:
        mix = tuple(tuple(wire_bytes(x, int(mtu), _frame(config)) for x in flow) for flow in mix)
    flows_base = replace(base, message_sizes=mix)
    starts = {id(t): _starts_s(t, flows) for t in ecn + fast}
    phased = all(v is not None for v in starts.values())
    fluid: dict = {}

    def fluid_of(t, simultaneous=False):
        key = (t["mode"], None if simultaneous else starts[id(t)])
        if key not in fluid:
            fluid[key] = flow_goodput(replace(flows_base, starts_s=key[1] or base.starts_s), km, t["mode"],
                                      case, local, ack_delay_s=rtt, payload_bytes=payload)["goodput_bps"]
        return fluid[key]

    model = statistics.fmean(_paired_gain(ecn, fast, fluid_of))
    steady = predicted_gain(replace(base, queue_delay=False, min_rate_bps=None), [km], case,
                            duration_s=duration_s)[0]["gain"]
    ci = confidence_interval(gains)
    described = (f"{flows} x {messages} x {'/'.join(f'{x / 1e6:g}' for x in sizes)} MB"
                 f"{f', in {mtu}-byte frames' if mtu else ''}")
    note = f"{len(gains)} paired repetitions; gain {ci.mean * 100:+.1f}%"
    if ci.half_width is not None:
        note += f" +- {ci.half_width * 100:.1f}% (95%)"
    if phased:
        offsets = [max(v) * 1e6 for v in starts.values()]
        together = statistics.fmean(_paired_gain(ecn, fast, lambda t: fluid_of(t, True)))
        note += (f"; model of these flows ({described}) with each trial's start offsets "
                 f"(0-{max(offsets):.0f} us) {model * 100:+.1f}%, started together {together * 100:+.1f}%")
    else:
        note += f"; model of these flows ({described}), started together (offsets not recorded) {model * 100:+.1f}%"
    note += f"; steady state (long flows) {steady * 100:+.1f}%"
    row = scalar_row(REF_GAIN, metric, 1 + ci.mean, 1 + model, "", backends=backends, note=note)
    row.plot = {"distance_km": km, "mean": ci.mean, "low": ci.low, "high": ci.high,
                "predicted": model, "steady_state": steady, "case": case}
    out.append(row)
    if seeds:
        out.append(_discrete_gain_row(row, ecn, fast, starts, seeds, backends,
                                      lambda t, n: discrete_flow_goodputs(
                                          replace(flows_base, starts_s=starts[id(t)] or base.starts_s), km,
                                          t["mode"], case, local, ack_delay_s=rtt, seeds=n,
                                          payload_bytes=payload)["goodput_bps"]))
    return out


def _discrete_gain_row(fluid: Row, ecn: list, fast: list, starts: dict, seeds: int, backends, goodputs) -> Row:
    """The gain row against the discrete simulation: per seed s, the mean over the paired repetitions of the
    model's ratio (each trial run with its own start offsets and seed s), as the replica's mean is formed;
    the reference is the median of those means, the tolerance the wider of 10 % and their 5-95 % range
    around it (a replica that realises the same process falls outside about 1 time in 10). ``goodputs(trial,
    n)``: the trial's mode's goodput for seeds 0..n-1.

    The fluid row of the same point (``fluid``) gets the band on its plot (one figure per case) and is marked
    out of scope where fewer than 90 % of those means pass it (:func:`rows.mark_scope`)."""
    runs: dict = {}

    def of(t):
        key = (t["mode"], starts[id(t)])
        if key not in runs:
            runs[key] = goodputs(t, seeds)
        return runs[key]

    means = []
    for s in range(seeds):
        means.append(1 + statistics.fmean(_paired_gain(ecn, fast, lambda t, s=s: of(t)[s])))
    med = statistics.median(means)
    low, high = nearest_rank(means, 0.05), nearest_rank(means, 0.95)
    tol = max(SCALAR_TOLERANCE, high / med - 1, 1 - low / med)
    fluid.plot.update(discrete=med - 1, discrete_low=low - 1, discrete_high=high - 1)
    mark_scope(fluid, [relative_error(m, fluid.expected) <= fluid.tolerance for m in means],
               f"discrete simulation of these flows ({seeds} seeds, paired means)")
    return scalar_row(REF_GAIN_DISCRETE, fluid.metric, fluid.replica, med, "", tolerance=tol, backends=backends,
                      note=f"{seeds} seeds per trial, {len(runs)} distinct trial set-ups; paired mean "
                           f"{med:.3f} [{low:.3f}, {high:.3f}] (5-95 %); tolerance {tol * 100:.0f}%")


def gain_points(rows: list[Row]) -> dict:
    """Per case, the gain rows' plot points (for :func:`testbed.validate.plots.plot_gain_vs_distance`)."""
    out: dict = {}
    for r in rows:
        if r.reference == REF_GAIN and r.plot:
            out.setdefault(r.plot["case"], []).append(r.plot)
    return out


