"""What a long-haul trial's captures say (no root: reads the pcaps :func:`longhaul_setup.captures` names).

    times = capture_times(out, case, r)
        cnps        {sender: capture times of the CNPs it received}
        signal      {"ce": the congestion point's CE-marked frames out, "cnp": its CNPs out towards the senders}
        receivers   {receiver: (CE-marked frames in, CNPs out)}
        crossing    capture times of the CNPs at the senders whose flows cross the congestion point
    feedback(times, mode)   the feedback delay on the one capture clock, and ECN's parts
    data_check(out, sender, cnp_interval_s, scale)   ``roce check --expect-ect`` of the data sample, as the
                                                     trial's ``data_check`` (:mod:`testbed.roce.sample`)

Every time is the kernel's capture timestamp (one clock for every namespace of the machine).

The data sample (``data-<sender>.pcap``, :data:`testbed.roce.sample.DATA_SAMPLE_FRAMES` whole frames) is the
first sender's RoCEv2 traffic in both directions at its host link, from before its QP starts until
tcpdump's ``-c`` stops it; what a sample that bounded can and cannot show, and how it is checked, is
:mod:`testbed.roce.sample`'s (shared with the collective's sweep). Here its data is never CE (it leaves
the sender before any switch could mark it): CE -> CNP is timed by ``signal-ce`` and ``receiver-<h>``.
"""

from __future__ import annotations

from pathlib import Path

from testbed.roce.opcodes import CNP
from testbed.roce.sample import check_sample, retx_gap_for
from testbed.roce.timing import destinations, opcode_times
from testbed.validate import longhaul_setup as S


def capture_times(out: Path, case: str, r, lag: dict | None = None) -> dict:
    """The trial folder ``out``'s captures as times (see the module docstring); ``lag``: {capture name:
    seconds to take out of the congestion point's signal captures} (:func:`longhaul_setup.netem_lag_s`)."""
    lag = lag or {}
    cnps = {s: opcode_times(out / f"cnp-{s}.pcap")[0] for s in r.senders}
    receivers = {h: (opcode_times(out / f"receiver-{h}.pcap", None, ce=True)[0],
                     opcode_times(out / f"receiver-{h}.pcap", CNP)[0]) for h in r.receivers}
    # the switch's CNPs for the crossing senders only (their addresses, read from the CNPs they received):
    # at the receiver's ToR every receiver port is a congestion point, and a CNP for another sender that
    # leaves first is not this flow's signal (it made one trial's feedback 94 us real too long)
    own = frozenset().union(*(destinations(out / f"cnp-{s}.pcap") for s in S.crossing(case, r))) or None
    return {"cnps": cnps, "receivers": receivers,
            "signal": {k: [t - lag.get(f"signal-{k}", 0.0)
                           for t in opcode_times(out / f"signal-{k}.pcap", op, to=to)[0]]
                       for k, op, to in (("ce", None, None), ("cnp", CNP, own))},
            "crossing": sorted(t for s in S.crossing(case, r) for t in cnps[s])}


def feedback(times: dict, mode: str) -> tuple[float | None, dict | None]:
    """(the feedback delay of ``mode``: :func:`longhaul_setup.feedback_on_wire`, ECN's parts:
    :func:`longhaul_setup.feedback_parts`, None with fast CNP)."""
    sig = times["signal"]
    delay = S.feedback_on_wire(mode, sig["ce"], sig["cnp"], times["crossing"])
    return delay, (S.feedback_parts(sig["ce"], times["receivers"], times["crossing"]) if mode == "ecn" else None)


def data_check(out: Path, sender: str, cnp_interval_s: float, scale: float) -> dict:
    """``roce check --expect-ect --cut-at`` of the trial folder ``out``'s data sample of ``sender``, as
    :func:`testbed.roce.sample.data_verdict`; ``cnp_interval_s``: the emulated CNP interval, ``scale``: the
    dilation (the resend gap is ``roce check``'s x scale)."""
    return check_sample(out / f"data-{sender}.pcap", cnp_interval_s, retx_gap_for(scale), S.DATA_SAMPLE_FRAMES)


def reread_feedback(folder: Path, config: dict, rows: list) -> list[str]:
    """Read each trial's feedback delay again from its captures, with this code; update the rows that differ.

    Why: the captures are the trial's raw record and the rows a reading of them; a reading fixed later (as
    the receiver's ToR pairing, 2026-12-05) must reach results taken before it, and ``testbed validate``
    judges what the captures say. A trial whose folder (``<km>km/<case>-<mode>-<rep>``) or captures are gone,
    or whose long haul was netem (its capture stamps need the run's plan to correct), keeps its row.
    Changed rows keep the old value as ``feedback_delay_ms_stored``. Returns one line per changed trial.
    """
    from testbed.scenario import SCENARIO_DIR

    spec = Path(config.get("spec") or "")
    if not spec.is_file():
        spec = SCENARIO_DIR / "specs" / (spec.name or "long-haul.yaml")
    if not spec.is_file():
        return []
    r = S.roles(S.graph(spec, config.get("scale"), config.get("incast")))
    scale = float(config.get("scale") or 1.0)
    changed = []
    for row in rows:
        trial = folder / f"{float(row['distance_km']):g}km" / f"{row['case']}-{row['mode']}-{row.get('repetition', 0)}"
        if row.get("long_haul_backend") == "netem" or not (trial / "signal-cnp.pcap").is_file():
            continue
        delay, _parts = feedback(capture_times(trial, row["case"], r), row["mode"])
        new = None if delay is None else round(delay / scale * 1e3, 4)
        old = row.get("feedback_delay_ms")
        if new != old and (new is None or old is None or abs(new - old) > 1e-4):
            row["feedback_delay_ms_stored"], row["feedback_delay_ms"] = old, new
            row.pop("feedback_check", None)
            changed.append(f"{row['case']} {float(row['distance_km']):g} km {row['mode']} #{row.get('repetition', 0)}: "
                           f"{old} -> {new} ms")
    return changed
