"""``testbed bench link``: how faithfully the link emulation delays, paces and marks (Mininet-HiFi style).

    netns A --veth-- delay line --veth-- netns B        tcpdump (ns timestamps) on both hosts

1. delay: idle link at 100 Mbit/s, emulated delays 1, 10, 50 ms; probes captured leaving A and arriving at
   B; per-probe error against ``delay + 1514*8/rate``.
2. gaps: rates 10-200 Mbit/s, iperf3 UDP at 1.2x the rate keeps the queue backlogged; gaps between
   consecutive full frames at B against ``1514*8/rate``.
3. RED: ECT probes at 1.1x a 10 Mbit/s bottleneck; each probe's queue depth from its queueing delay,
   marked fraction per depth bin against the configured curve.
4. max pps: 64-byte iperf3 UDP at rising rates through an unshaped line; the highest rate it forwards
   whole (max_pps), and whole with < 1% of frames late (max_pps_on_time).

``--json`` keys: backend, delay_p99_error_pct, gap_p99_error_pct, max_pps (+ per-case details).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from testbed.console import console, print_json, require_root
from testbed.links import fidelity
from testbed.links.model import LinkParams, RedParams
from testbed.links.pcap import probe_arrivals, read_pcap
from testbed.links.probe import summarise
from testbed.poll import poll

PROBE_PORT = 5201
IPERF_PORT = 5302
DELAY_RATE_BPS = 100e6
FRAME = fidelity.FULL_FRAME


def cases(quick: bool) -> dict:
    """What to measure (pure): the full run, or --quick (about a third of the time)."""
    if quick:
        return {"delays_s": (0.001, 0.050), "rates_bps": (10e6, 100e6), "probes": 400, "probe_pps": 400,
                "gap_seconds": 1.0, "red_probes": 1000, "pps_seconds": 1.5,
                "pps_steps": (10_000, 0)}
    return {"delays_s": (0.001, 0.010, 0.050), "rates_bps": (10e6, 50e6, 100e6, 200e6), "probes": 2000,
            "probe_pps": 1000, "gap_seconds": 2.0, "red_probes": 2500, "pps_seconds": 2.0,
            "pps_steps": (5_000, 10_000, 15_000, 20_000, 30_000, 0)}


def register(sub) -> None:
    parser = sub.add_parser("link", help="link emulation fidelity: delay, gaps, RED curve, max pps",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases, shorter runs")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--out", metavar="DIR", help="keep captures and delay-line stats here")
    parser.add_argument("--no-lock", action="store_true",
                        help="do not queue for the machine-wide run lock (names are unique; figures may then "
                             "include the load of another run)")
    parser.set_defaults(func=run)


def run(args) -> int:
    require_root("testbed bench link")
    from testbed.emu.registry import RunRegistry
    from testbed.links.wire import open_wire

    plan = cases(args.quick)
    workdir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="testbed-bench-link-"))
    with RunRegistry("bench-link", exclusive=not args.no_lock) as reg:
        wire = open_wire(reg, workdir)
        report = {"backend": "userspace"}
        report["delay_cases"] = [_delay_case(wire, d, plan) for d in plan["delays_s"]]
        iperf = reg.spawn(wire.exec_argv("b", ["iperf3", "-s", "-p", str(IPERF_PORT)]),
                          log=workdir / "iperf3-server.log")
        poll(lambda: _listening(wire, IPERF_PORT), timeout=10, what="iperf3 server to listen")
        report["gap_cases"] = [_gap_case(wire, r, plan) for r in plan["rates_bps"]]
        report["red"] = _red_case(wire, plan)
        report["pps"] = _pps_case(wire, plan)
        wire.stop()
        iperf.terminate()
    report["delay_p99_error_pct"] = max(c["p99_error_pct"] for c in report["delay_cases"])
    report["gap_p99_error_pct"] = max(c["p99_error_pct"] for c in report["gap_cases"])
    report["red_max_abs_error"] = max((b["abs_error"] for b in report["red"]["bins"]), default=None)
    report["max_pps"] = report["pps"]["max_pps"]
    report["max_pps_on_time"] = report["pps"]["max_pps_on_time"]
    report["workdir"] = str(workdir)
    report["locked"] = not args.no_lock
    report["load_average"] = os.getloadavg()
    (workdir / "bench-link.json").write_text(json.dumps(report, indent=1))
    if args.json:
        print_json(report)
    else:
        _print(report)
    return 0


def _listening(wire, port: int) -> bool:
    out = subprocess.run(wire.exec_argv("b", ["ss", "-Hltn", f"sport = :{port}"]), capture_output=True, text=True)
    return bool(out.stdout.strip())


def _late(stats: dict) -> dict:
    d = stats.get("directions", {}).get("a>b", {})
    return {"emulator_late": d.get("emulator_late"), "max_lateness_us": round(d.get("max_lateness_s", 0) * 1e6, 1),
            "rx_kernel_drops": stats.get("rx_kernel_drops"), "realtime": stats.get("realtime")}


def _delay_case(wire, delay_s: float, plan: dict) -> dict:
    wire.restart(LinkParams(rate_bps=DELAY_RATE_BPS, delay_s=delay_s), seed=1)
    with wire.capture("a", PROBE_PORT, f"delay{delay_s * 1e3:g}ms-a") as pa, \
            wire.capture("b", PROBE_PORT, f"delay{delay_s * 1e3:g}ms-b") as pb:
        wire.probe(plan["probes"], plan["probe_pps"], size=FRAME - 42, port=PROBE_PORT)
    stats = wire.stop()
    sent, got = probe_arrivals(read_pcap(pa), PROBE_PORT), probe_arrivals(read_pcap(pb), PROBE_PORT)
    ideal = delay_s + fidelity.serialisation_s(FRAME, DELAY_RATE_BPS)
    delays = fidelity.one_way_delays(sent, got)
    case = {"delay_ms": delay_s * 1e3, "ideal_ms": round(ideal * 1e3, 4),
            "median_ms": round(fidelity.percentile(delays, 50) * 1e3, 4),
            **fidelity.error_summary(fidelity.relative_errors(delays, ideal)), **_late(stats)}
    console.print(f"delay {delay_s * 1e3:g} ms: p99 error {case['p99_error_pct']}% over {case['samples']} probes")
    return case


def _gap_case(wire, rate_bps: float, plan: dict) -> dict:
    wire.restart(LinkParams(rate_bps=rate_bps, delay_s=0.001, limit=200), seed=2)
    with wire.capture("b", IPERF_PORT, f"gaps{rate_bps / 1e6:g}M") as pb:
        subprocess.run(wire.exec_argv("a", ["iperf3", "-c", wire.ip_b, "-p", str(IPERF_PORT), "-u",
                                            "-b", str(int(rate_bps * 1.2)), "-l", str(FRAME - 42),
                                            "-t", str(plan["gap_seconds"])]),
                       capture_output=True, text=True, timeout=60, check=True)
    stats = wire.stop()
    arrivals = [ts for ts, _f, length in read_pcap(pb) if length == FRAME]
    ideal = fidelity.serialisation_s(FRAME, rate_bps)
    gaps = fidelity.backlogged_gaps(arrivals, skip=50)
    case = {"rate_mbps": rate_bps / 1e6, "ideal_gap_us": round(ideal * 1e6, 2),
            "median_gap_us": round(fidelity.percentile(gaps, 50) * 1e6, 2),
            **fidelity.error_summary(fidelity.relative_errors(gaps, ideal)), **_late(stats)}
    console.print(f"gaps at {rate_bps / 1e6:g} Mbit/s: p99 error {case['p99_error_pct']}% over {case['samples']} gaps")
    return case


def _red_case(wire, plan: dict) -> dict:
    rate, delay = 10e6, 0.001
    red = RedParams(kmin=10, kmax=50, pmax=0.5, unit="packets")
    wire.restart(LinkParams(rate_bps=rate, delay_s=delay, limit=70, red=red), seed=3)
    pps = 1.1 * rate / (FRAME * 8)
    sent, result = wire.probe(plan["red_probes"], pps, size=FRAME - 42, tos=0x02, port=PROBE_PORT)
    stats = wire.stop()
    s = summarise(result, sent["sent"])
    ser = fidelity.serialisation_s(FRAME, rate)
    depths = [fidelity.queue_depth(d, delay + ser, ser) for d in s["delays_s"]]
    bins = fidelity.red_bins(depths, [e == 3 for e in result["ecn"]], red)
    console.print(f"RED: {s['ce']} CE of {s['received']} probes; max |observed - curve| "
                  f"{max((b['abs_error'] for b in bins), default=float('nan')):.3f} over {len(bins)} depth bins")
    return {"kmin": red.kmin, "kmax": red.kmax, "pmax": red.pmax, "unit": red.unit, "received": s["received"],
            "ce": s["ce"], "bins": bins, **_late(stats)}


def _pps_case(wire, plan: dict) -> dict:
    """Offer 64-byte frames at rising rates. ``max_pps``: the highest rate forwarded whole (no kernel
    receive drops, >= 98% forwarded); ``max_pps_on_time``: and with < 1% of frames late."""
    steps = []
    for pps in plan["pps_steps"]:
        wire.restart(LinkParams(), seed=4)
        rate = "0" if pps == 0 else str(int(pps * 64 * 8))  # iperf3 -b counts payload bits; 0 = unlimited
        out = subprocess.run(wire.exec_argv("a", ["iperf3", "-c", wire.ip_b, "-p", str(IPERF_PORT), "-u", "-b", rate,
                                                  "-l", "64", "-t", str(plan["pps_seconds"]), "-J"]),
                             capture_output=True, text=True, timeout=60, check=True)
        stats = wire.stop()
        end = json.loads(out.stdout)["end"]["sum"]
        d = stats["directions"]["a>b"]
        seconds = float(end["seconds"])
        step = {"offered_pps": round(end["packets"] / seconds), "forwarded_pps": round(d["tx_packets"] / seconds),
                "late_fraction": round(d["emulator_late"] / max(1, d["tx_packets"]), 4), **_late(stats)}
        step["whole"] = step["rx_kernel_drops"] == 0 and step["forwarded_pps"] >= 0.98 * step["offered_pps"]
        step["on_time"] = step["whole"] and step["late_fraction"] < 0.01
        console.print(f"pps: offered {step['offered_pps']:,}, forwarded {step['forwarded_pps']:,}, "
                      f"late {step['late_fraction']:.2%}, whole {step['whole']}, on time {step['on_time']}")
        steps.append(step)
    return {"max_pps": max((s["forwarded_pps"] for s in steps if s["whole"]), default=0),
            "max_pps_on_time": max((s["forwarded_pps"] for s in steps if s["on_time"]), default=0),
            "max_forwarded_pps": max(s["forwarded_pps"] for s in steps), "steps": steps,
            "cpu_count": os.cpu_count()}


def _print(report: dict) -> None:
    from rich.table import Table

    t = Table(title="link emulation fidelity (userspace delay line)")
    for col in ("case", "ideal", "median", "p50 err %", "p99 err %", "late", "samples"):
        t.add_column(col)
    for c in report["delay_cases"]:
        t.add_row(f"delay {c['delay_ms']:g} ms", f"{c['ideal_ms']} ms", f"{c['median_ms']} ms",
                  str(c["p50_error_pct"]), str(c["p99_error_pct"]), str(c["emulator_late"]), str(c["samples"]))
    for c in report["gap_cases"]:
        t.add_row(f"gaps {c['rate_mbps']:g} Mbit/s", f"{c['ideal_gap_us']} us", f"{c['median_gap_us']} us",
                  str(c["p50_error_pct"]), str(c["p99_error_pct"]), str(c["emulator_late"]), str(c["samples"]))
    console.print(t)
    console.print(f"RED max |observed - curve|: {report['red_max_abs_error']}; forwards {report['max_pps']:,} pps "
                  f"whole, {report['max_pps_on_time']:,} pps with < 1% late frames; details in "
                  f"{report['workdir']}/bench-link.json")
