"""What a long-haul trial's captures say (no root: reads the pcaps :func:`longhaul_setup.captures` names).

    times = capture_times(out, case, r)
        cnps        {sender: capture times of the CNPs it received}
        signal      {"ce": the congestion point's CE-marked frames out, "cnp": its CNPs out towards the senders}
        receivers   {receiver: (CE-marked frames in, CNPs out)}
        crossing    capture times of the CNPs at the senders whose flows cross the congestion point
    feedback(times, mode)   the feedback delay on the one capture clock, and ECN's parts

Every time is the kernel's capture timestamp (one clock for every namespace of the machine).
"""

from __future__ import annotations

from pathlib import Path

from testbed.roce.opcodes import CNP
from testbed.roce.timing import opcode_times
from testbed.validate import longhaul_setup as S


def capture_times(out: Path, case: str, r, lag: dict | None = None) -> dict:
    """The trial folder ``out``'s captures as times (see the module docstring); ``lag``: {capture name:
    seconds to take out of the congestion point's signal captures} (:func:`longhaul_setup.netem_lag_s`)."""
    lag = lag or {}
    cnps = {s: opcode_times(out / f"cnp-{s}.pcap")[0] for s in r.senders}
    receivers = {h: (opcode_times(out / f"receiver-{h}.pcap", None, ce=True)[0],
                     opcode_times(out / f"receiver-{h}.pcap", CNP)[0]) for h in r.receivers}
    return {"cnps": cnps, "receivers": receivers,
            "signal": {k: [t - lag.get(f"signal-{k}", 0.0) for t in opcode_times(out / f"signal-{k}.pcap", op)[0]]
                       for k, op in (("ce", None), ("cnp", CNP))},
            "crossing": sorted(t for s in S.crossing(case, r) for t in cnps[s])}


def feedback(times: dict, mode: str) -> tuple[float | None, dict | None]:
    """(the feedback delay of ``mode``: :func:`longhaul_setup.feedback_on_wire`, ECN's parts:
    :func:`longhaul_setup.feedback_parts`, None with fast CNP)."""
    sig = times["signal"]
    delay = S.feedback_on_wire(mode, sig["ce"], sig["cnp"], times["crossing"])
    return delay, (S.feedback_parts(sig["ce"], times["receivers"], times["crossing"]) if mode == "ecn" else None)
