"""``testbed bench pfc``: how fast a PAUSE stops the sender in the compiled link core, emulated and real.

    sender NICs (link cores) --tc fan-in--> bottleneck link core (PFC, xoff) --> receiver
           ^                                   | PAUSE / XON out of its upstream side
           +------------- tc mirror -----------+

An N:1 incast (:mod:`testbed.pfc.fanin`) makes the bottleneck cross xoff and xon many times; every PFC
frame it sends and every one a sender's core receives is logged with CLOCK_MONOTONIC times (shared by all
processes), so each PAUSE is followed from the frame that crossed the threshold to the moment the sender's
model holds the priority:

    crossing frame arrives (kernel stamp) --bottleneck lag--> PAUSE sent --transit (veth, tc)--> PAUSE
    arrives at the sender (kernel stamp) --sender lag--> the sender's model takes it (holds one delay later)

The sender's model acts on the PAUSE one link delay after its arrival (the cable back to the sender);
a sender lag beyond that lets through frames that should have been held: that is what the headroom must
absorb beyond physics. The figures are emulated seconds (what the replica lives in) and real
ones (÷ scale): the issue's goal is PAUSE received -> egress stopped <= 1 us real at the default dilation.
Absolute times on this shared machine are noise: the load average is printed next to them, and the host's
steal time over the trial (the hypervisor running none of this VM's vCPUs: the emulator's late frames track it).
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
from pathlib import Path

from testbed.console import out, print_json, require_root
from testbed.emu.cpustat import load_average
from testbed.errors import SpecError


def register(sub) -> None:
    p = sub.add_parser("pfc", help="PFC reaction time of the link core (crossing -> sender held)",
                       description=__doc__)
    p.add_argument("--senders", type=int, default=2, help="senders of the incast (default 2, at most 8)")
    p.add_argument("--seconds", type=float, default=1.0, help="how long they send (default 1.0)")
    p.add_argument("--scale", type=float, default=1000.0, help="time dilation (default 1000)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=_main)


def _quantiles(xs: list) -> dict:
    if not xs:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    s = sorted(xs)
    return {"n": len(s), "p50": statistics.median(s), "p99": s[min(len(s) - 1, int(0.99 * len(s)))], "max": s[-1]}


def reaction_samples(stats: dict) -> dict:
    """Per PAUSE (not XON): the three lags and their sum, pairing the bottleneck's i-th sent PFC frame with
    each sender's i-th received one (a fan-out of the same frames, in order). Emulated seconds."""
    lr_tx = stats["LR"]["directions"]["a>b"].get("pfc_tx_events", [])
    parts = {"bottleneck_lag": [], "transit": [], "sender_lag": [], "total": []}
    mismatched = 0
    for name, doc in stats.items():
        if name == "LR":
            continue
        rx = doc["directions"]["a>b"].get("pfc_rx_events", [])
        if len(rx) != len(lr_tx):
            mismatched += 1
        for (t_model, t_sent, pause), (t_arr, t_proc, rx_pause) in zip(lr_tx, rx, strict=False):
            if not pause or not rx_pause:
                continue
            parts["bottleneck_lag"].append(t_sent - t_model)
            parts["transit"].append(t_arr - t_sent)
            parts["sender_lag"].append(t_proc - t_arr)
            parts["total"].append(t_proc - t_model)
    return {"parts": parts, "senders_with_missing_frames": mismatched, "pfc_frames_sent": len(lr_tx)}


def measure(senders: int, seconds: float, scale: float) -> dict:
    from testbed.emu.registry import RunRegistry
    from testbed.links.wire import name_prefix
    from testbed.pfc.config import PfcConfig
    from testbed.pfc.fanin import FanIn, IncastParams, run_trial

    rate = 20e6
    pfc = PfcConfig(priorities=(3,), xoff_bytes=30e3, xon_bytes=30e3 - 2 * 1538, headroom_bytes=senders * 50e3)
    flows = [(i, 26 << 2 | 2, 0.9 * rate / 8000) for i in range(senders)]
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="bench-pfc-") as tmp, RunRegistry("bench-pfc") as run:
        fan = FanIn(run, name_prefix("b"), Path(tmp), senders)
        fan.build()
        res = run_trial(fan, IncastParams(senders=senders, scale=scale, rate_bps=rate, pfc=pfc), flows, seconds)
    samples = reaction_samples(res["stats"])
    rows = {k: {"emulated_us": {q: (v * 1e6 if v is not None else None) for q, v in _quantiles(xs).items() if q != "n"},
                "real_ns": {q: (v / scale * 1e9 if v is not None else None) for q, v in _quantiles(xs).items() if q != "n"},
                "n": len(xs)}
            for k, xs in samples["parts"].items()}
    led = res["ledger"]["priorities"]["3"]
    return {"senders": senders, "scale": scale, "rate_bps": rate, "real_rate_bps": rate * scale,
            "reaction": rows, "pfc_frames_sent": samples["pfc_frames_sent"],
            "senders_with_missing_frames": samples["senders_with_missing_frames"],
            "roce_sent": led["sent"], "roce_dropped": led["dropped"], "valid": res["valid"], "checks": res["checks"],
            "emulator_late": res["emulator_late"], "frames": res["frames"], "late_fraction": res["late_fraction"],
            "host_steal": res["host_steal"],
            "cpu": res["cpu"], "load_average_before": load_before, "load_average_after": load_average(),
            "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
            "goal": "PAUSE received -> egress stopped (sender_lag) <= 1 us real at the default dilation"}


def _fmt(x) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _main(args) -> int:
    require_root("testbed bench pfc")
    if not 1 <= args.senders <= 8:
        raise SpecError("--senders", f"must be 1..8, got {args.senders}")
    if not args.seconds > 0 or not args.scale >= 1:
        raise SpecError("--seconds" if not args.seconds > 0 else "--scale", "must be positive (scale >= 1)")
    doc = measure(args.senders, args.seconds, args.scale)
    if args.json:
        print_json(doc)
        return 0 if doc["valid"] else 1
    from rich.table import Table

    t = Table(title=f"PFC reaction, {doc['senders']}:1 incast, scale {doc['scale']:g} ({doc['uptime']})")
    for col in ("stage", "n", "p50 emu us", "p99 emu us", "max emu us", "p50 real ns", "p99 real ns", "max real ns"):
        t.add_column(col, justify="right" if col != "stage" else "left")
    for stage, row in doc["reaction"].items():
        e, r = row["emulated_us"], row["real_ns"]
        t.add_row(stage.replace("_", " "), str(row["n"]), _fmt(e["p50"]), _fmt(e["p99"]), _fmt(e["max"]),
                  _fmt(r["p50"]), _fmt(r["p99"]), _fmt(r["max"]))
    out.print(t)
    out.print(f"{doc['pfc_frames_sent']} PFC frames sent; RoCE {doc['roce_sent']} sent, {doc['roce_dropped']} "
                  f"dropped; trial valid: {doc['valid']}"
                  + ("" if doc["valid"] else f" (failed: {', '.join(k for k, v in doc['checks'].items() if not v)})")
                  + f"; late {doc['emulator_late']} of {doc['frames']} frames, host steal {100 * doc['host_steal']:.1f}%"
                  + f"; machine CPU {doc['cpu']['machine_mean']:.0f}%; "
                  f"load {' '.join(f'{x:.2f}' for x in doc['load_average_after'])}")
    return 0 if doc["valid"] else 1
