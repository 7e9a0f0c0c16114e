"""The long-haul quick result on both link backends, side by side (pure; issue 14, docs/link-fidelity.md).

The same experiment twice in one TCG guest (docs/vm.md): ``long_haul_cnp`` at 30 km, bottleneck at the
sender-side DCI, ECN and fast CNP, once with tc netem on the long haul (the kernel backend the guest's
kernel has) and once with ``--link-backend userspace`` (the link node this project's host uses). Run by
``tests/vm/guest/test_long_haul_backends.py`` in every ``make vm-test`` and by ``make link-fidelity``,
which writes :func:`markdown` into docs/link-fidelity.md.

Why the configuration differs from the host's ``--quick`` (measured in the guest, docs/vm.md "The long
haul in the guest"): at the spec's scale 1000 the guest is the limit, not the network -- its CPU was at
92-95 % and each soft-RDMA sender got ~73 of the 1150 packets/s its 10 Mbit/s line needs (BMv2 forwards
~1.1 kpps in the guest, ``testbed bench p4``, against 15-20 on the host), so queues never built and ECN
marked once. At scale 10000 the senders still fell short of line rate (queue peaks 24-69, one ECN trial
without a mark); at :data:`SCALE` they reach it (queue peaks 139-205) with the guest at ~60 % CPU.
:data:`SIZE` and :data:`ITERS` keep the added time small: at scale 20000 the 30 km round trip is 6 s.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Time dilation in the guest (the host runs the spec's 1000): 10G -> 0.5 Mbit/s, 30 km -> 3 s one way.
SCALE = 20000
#: One message of 256 KB per sender (250 frames, 0.7 x the 30 km BDP of 349 frames).
SIZE = "256KB"
ITERS = 1
#: What BMv2 forwards in the guest (``testbed bench p4 --sizes 1400``: 1.1 kpps, a lower bound), for the
#: scenario's saturation check (the host's default is 15000).
BENCH_PPS = 1000
BACKENDS = ("netem", "userspace")
#: ``--link-backend`` of each: netem is what the plan picks by itself where doctor finds sch_netem (``auto``).
LINK_BACKEND_FLAG = {"netem": "auto", "userspace": "userspace"}
MODES = ("ecn", "fast-cnp")


def argv(backend: str, out: str | Path) -> list[str]:
    """The scenario command of one backend's run (results in ``out``)."""
    return ["testbed", "run", "long_haul_cnp", "--quick", "--cases", "sender-dci", "--distances", "30",
            "--scale", str(SCALE), "--size", SIZE, "--iters", str(ITERS), "--bench-pps", str(BENCH_PPS),
            "--link-backend", LINK_BACKEND_FLAG[backend], "--json", "--out", str(out)]


def load(folder: Path) -> dict:
    """{mode: row of rows.json, with the trial's ``settled_s``, ``ring_frames_min``, link-node lateness and
    the machine's timer stalls (``timers``: :mod:`testbed.emu.timerprobe`)}.

    The row is valid only when its health block is too (:func:`testbed.emu.runhealth.assess` over the
    trial's CPU, timers and ledger, as the run's ``emulator_ok`` judges it): a netem trial whose machine's
    timers stalled is INVALID, as a link-node trial whose frames were late is."""
    from testbed.emu.runhealth import assess

    folder = Path(folder)
    out = {}
    for row in json.loads((folder / "rows.json").read_text()):
        trial = json.loads((folder / f"{row['distance_km']:g}km" / f"{row['case']}-{row['mode']}" / "trial.json").read_text())
        late = trial.get("emulator", {}).get("late_fraction")
        cpu = trial.get("cpu", {})
        block = assess(cpu=cpu, ledger=trial.get("emulator"), reasons=(trial.get("health") or {}).get("reasons", []))
        reasons = list(row["validity"]["reasons"])
        reasons += [f"emulator unhealthy: {r}" for r in block["emulator"]["reasons"] if not any(r in x for x in reasons)]
        valid = row["valid"] and not reasons
        out[row["mode"]] = {**row, "valid": valid, "validity": {**row["validity"], "valid": valid, "reasons": reasons},
                            "settled_s": trial.get("settled_s"), "ring_frames_min": trial.get("ring_frames_min"),
                            "late_fraction": late, "elapsed_s": trial.get("elapsed_s"), "cpu": cpu,
                            "timers": cpu.get("timers")}
    return out


def _f(x, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.{digits}g}"


def _cell(r: dict | None, key: str) -> str:
    if r is None:
        return "not run"
    if key == "valid":
        return "valid" if r["valid"] else "INVALID: " + "; ".join(r["validity"]["reasons"])
    if key == "lost":
        acc = r["accounting"]
        places = ", ".join(f"{k} {n}" for k, n in (acc.get("places") or {}).items())
        return f"{acc['lost']} of {acc['sent']} ({places or 'none in the emulator'}), unaccounted {acc['unaccounted']}"
    if key == "cpu":
        return f"{r['cpu'].get('machine_mean', 0):.0f} %"
    if key == "late_fraction":
        if r.get("long_haul_backend") == "netem":
            return "no link node: judged by the machine's timers (next row)"
        return "-" if r.get("late_fraction") is None else f"{r['late_fraction']:.1%}"
    if key == "timers":
        t = r.get("timers") or {}
        if t.get("stalled_fraction") is None:
            return "not measured" + (f" ({t['error']})" if t.get("error") else "")
        beyond = (t.get("stalled_fraction_beyond") or {}).get("5ms")
        return (f"{t['stalled_fraction']:.1%} beyond {t['tolerance_us'] / 1e3:g} ms"
                + ("" if beyond is None or t["tolerance_us"] == 5000 else f" ({beyond:.1%} beyond 5 ms)")
                + f"; {t['stalls']} wake-up{'' if t['stalls'] == 1 else 's'} > {t['stall_ms']:g} ms, longest {t['lateness_us']['max'] / 1e3:.0f} ms"
                + f" ({t['policy']})")
    if key == "signals":
        return f"{r['marks']} marks, {r['switch_cnps']} switch CNPs, {r['cnps_at_senders']} CNPs at senders"
    return _f(r.get(key))


ROWS = (("trial", "valid"), ("feedback delay, ms (real)", "feedback_delay_ms"), ("FCT p50, ms (real)", "fct_p50_ms"),
        ("FCT p99, ms (real)", "fct_p99_ms"), ("goodput, Mb/s (real)", "throughput_mbps"),
        ("queue peak, frames", "queue_peak_pkts"), ("queue mean, frames", "queue_mean_pkts"),
        ("congestion signals", "signals"), ("frames lost", "lost"), ("guest CPU (machine)", "cpu"),
        ("link-node frames late", "late_fraction"), ("guest's timers late (beyond the link nodes' tolerance)", "timers"))


def markdown(results: dict, header: list[str] | None = None) -> str:
    """The side-by-side table: ``results`` is {backend: :func:`load` of its run} (a missing backend: 'not run')."""
    cols = [(b, m) for m in MODES for b in BACKENDS]
    lines = [*(header or []), "",
             "| | " + " | ".join(f"{m}, {'tc netem' if b == 'netem' else 'userspace link node'}" for b, m in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for label, key in ROWS:
        lines.append(f"| {label} | " + " | ".join(_cell(results.get(b, {}).get(m), key) for b, m in cols) + " |")
    return "\n".join(lines) + "\n"
