"""``testbed bench link``: how faithfully the link emulation delays, paces and marks (Mininet-HiFi style).

    netns A --veth-- delay line --veth-- netns B        tcpdump (ns timestamps) on both hosts

1. delay: idle link at 100 Mbit/s, emulated delays 1, 10, 50 ms; probes captured leaving A and arriving at
   B; per-probe error against the ideal link fed the probes as captured leaving A (``delay + 1514*8/rate``
   plus any wait behind earlier probes: a sender held back by other load bunches them; ``queued_probes``
   counts those, ``idle_link_p99_error_pct`` is the error against the idle link's delay alone).
2. gaps: rates 10-200 Mbit/s, full frames offered at 1.2x the rate keep the queue backlogged (the source
   :mod:`testbed.bench.gap_source`, which ``testbed validate`` shares: the compiled core's ``gen``, in groups
   of 32; iperf3 UDP when the core did not build); gaps between consecutive full frames at B against
   ``1514*8/rate``.
3. RED: ECT probes at 1.1x a 10 Mbit/s bottleneck; each probe's queue depth from its queueing delay,
   marked fraction per depth bin against the configured curve.
4. max pps: 64-byte UDP frames (``gen``) at rising rates through an unshaped line; the highest rate it forwards
   whole (max_pps), and whole with < 1% of frames late (max_pps_on_time); CPU per packet from the
   link process's own CPU time.

5. loss: UDP probes through a 1 % random-loss link; measured loss against the configured rate (binomial
   z-score) and every lost probe against the backend's own loss counter.

Side by side in one run: the compiled core (``c``, the default link core), the Python line (``python``)
and the compiled forwarder without the model (``bare``: pps ladder only, the ceiling of the I/O path);
with ``--kernel`` also the kernel backend (``netem``: tc netem -> tbf -> red on a bridge in the delay
line's place, :mod:`testbed.links.kwire`; cases 1-3 and 5), where the kernel has sch_netem and sch_red
(the test VM, docs/vm.md; ``make link-fidelity`` writes docs/link-fidelity.md with ``--markdown``).
Then delay and gap cases again for the model backends with a competing load (one busy loop per CPU,
normal priority: another run on the machine). ``--slow-cpu``: rates and probe rates a QEMU TCG guest
keeps up with (a Python probe sender there manages ~700 packets/s).

``--json`` keys: backend, core, delay_p99_error_pct, gap_p99_error_pct, max_pps, max_pps_on_time (all of
the default core, as before), cores.{c,python,bare}.{...same keys...}, comparison, loaded (+ details).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from testbed.bench.gap_source import frame_ledger, gen_binary, listening, offer_backlog, wait_tcp_quiet
from testbed.console import console, out, print_json, require_root
from testbed.emu.cpustat import load_average
from testbed.links import fidelity
from testbed.links.model import LinkParams, LossModel, RedParams
from testbed.links.pcap import probe_arrivals, read_pcap
from testbed.links.probe import summarise
from testbed.poll import poll

PROBE_PORT = 5201
#: The bench's iperf3 server (the pps ladder's source when the compiled core did not build).
IPERF_PORT = 5302
DELAY_RATE_BPS = 100e6
FRAME = fidelity.FULL_FRAME
#: Frame of the pps ladder: 64 B of UDP payload, as iperf3 -l 64 sent before.
PPS_FRAME = 64 + 42
#: The RED case's delay-line seed in the benchmark (fixed: runs compare; validate draws its own per run).
RED_SEED = 3

CORES = ("c", "python", "bare")
#: Cores that carry the model (the bare forwarder only takes the pps ladder).
MODEL_CORES = ("c", "python")
#: The kernel backend's column (``--kernel``).
KERNEL = "netem"
#: Configured random loss of the loss case.
LOSS_RATE = 0.01


def cases(quick: bool, slow_cpu: bool = False) -> dict:
    """What to measure (pure): the full run, or --quick (about a third of the time); ``slow_cpu``: rates a
    TCG guest sustains (bottlenecks of 2-10 Mbit/s, probes at a few hundred per second)."""
    if slow_cpu:
        return {"delays_s": (0.001, 0.050) if quick else (0.001, 0.010, 0.050), "delay_rate_bps": 10e6,
                "rates_bps": (2e6, 5e6) if quick else (2e6, 5e6, 10e6), "probes": 300 if quick else 1000,
                "probe_pps": 200, "gap_seconds": 2.0 if quick else 4.0, "red_rate_bps": 4e6,
                "red_probes": 2000 if quick else 2500, "loss_probes": 3000 if quick else 10_000, "loss_pps": 500,
                "pps_seconds": 1.0, "pps_steps": (), "loaded_delays_s": (0.001,),
                "loaded_rates_bps": (2e6,)}
    if quick:
        return {"delays_s": (0.001, 0.050), "rates_bps": (10e6, 200e6), "probes": 400, "probe_pps": 400,
                "gap_seconds": 1.0, "red_probes": 1000, "loss_probes": 3000, "loss_pps": 2000, "pps_seconds": 1.5,
                "pps_steps": (10_000, 100_000, 0), "loaded_delays_s": (0.001,), "loaded_rates_bps": (100e6,)}
    return {"delays_s": (0.001, 0.010, 0.050), "rates_bps": (10e6, 50e6, 100e6, 200e6), "probes": 2000,
            "probe_pps": 1000, "gap_seconds": 2.0, "red_probes": 2500, "loss_probes": 10_000, "loss_pps": 2000,
            "pps_seconds": 2.0, "pps_steps": (5_000, 10_000, 20_000, 50_000, 100_000, 150_000, 200_000, 0),
            "loaded_delays_s": (0.001, 0.010), "loaded_rates_bps": (10e6, 100e6, 200e6)}


def register(sub) -> None:
    parser = sub.add_parser("link", help="link emulation fidelity: delay, gaps, RED curve, max pps",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases, shorter runs")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--out", metavar="DIR", help="keep captures and delay-line stats here")
    parser.add_argument("--cores", default=",".join(CORES),
                        help="link cores to compare, comma-separated (c, python, bare); the first is reported "
                             "in the top-level keys")
    parser.add_argument("--kernel", action="store_true",
                        help="also measure the kernel backend (tc netem -> tbf -> red) on the same cases, side by "
                             "side (needs sch_netem and sch_red: the test VM, docs/vm.md)")
    parser.add_argument("--slow-cpu", action="store_true",
                        help="rates a QEMU TCG guest keeps up with (2-10 Mbit/s bottlenecks, slower probes)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the side-by-side table as markdown")
    parser.add_argument("--no-load", action="store_true", help="skip the run with a competing CPU load")
    parser.add_argument("--cpu", type=int, default=None,
                        help="pin the compiled core to this CPU (not the default: a pinned core that spins starves "
                             "that CPU's own kworkers until the kernel stops it for ~50 ms, docs/links.md)")
    parser.add_argument("--no-lock", action="store_true",
                        help="do not queue for the machine-wide run lock (names are unique; figures may then "
                             "include the load of another run)")
    parser.set_defaults(func=run)


def _parse_cores(text: str) -> tuple[str, ...]:
    from testbed.errors import SpecError

    cores = tuple(c.strip() for c in text.split(",") if c.strip())
    bad = [c for c in cores if c not in CORES]
    if bad or not cores:
        raise SpecError("--cores", f"expected a comma-separated list of {', '.join(CORES)}, got {text!r}")
    return cores


def run(args) -> int:
    cores = _parse_cores(args.cores)
    require_root("testbed bench link")
    from testbed.emu.registry import RunRegistry
    from testbed.links.core import selected_core
    from testbed.links.kwire import open_kernel_wire
    from testbed.links.wire import open_wire

    if args.kernel:
        _check_kernel()
    plan = cases(args.quick, args.slow_cpu)
    workdir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="testbed-bench-link-"))
    per_core: dict = {}
    loaded: dict = {}
    backends = (*cores, KERNEL) if args.kernel else cores
    modelled = [c for c in backends if c in (*MODEL_CORES, KERNEL)]
    with RunRegistry("bench-link", exclusive=not args.no_lock) as reg:
        wires = {"userspace": open_wire(reg, workdir)}
        wires["userspace"].bench_cpu = args.cpu
        if args.kernel:
            wires[KERNEL] = open_kernel_wire(reg, workdir, tag="k")
        servers = [reg.spawn(w.exec_argv("b", ["iperf3", "-s", "-p", str(IPERF_PORT)]),
                             log=workdir / f"iperf3-server-{name}.log") for name, w in wires.items()]
        for w in wires.values():
            poll(lambda w=w: listening(w, IPERF_PORT), timeout=30, what="iperf3 server to listen")
        for core in backends:
            wire = wires[KERNEL if core == KERNEL else "userspace"]
            ran, detail = (KERNEL, "tc netem -> tbf -> red (testbed.links.tc) on a bridge") if core == KERNEL \
                else selected_core(core)
            console.print(f"[bold]link backend {core}[/bold]: {detail}")
            doc: dict = {"requested": core, "core": ran}
            if core in modelled:
                doc["delay_cases"] = [_delay_case(wire, d, plan, core) for d in plan["delays_s"]]
                doc["gap_cases"] = [_gap_case(wire, r, plan, core) for r in plan["rates_bps"]]
                doc["red"] = _red_case(wire, plan, core)
                doc["loss"] = _loss_case(wire, plan, core)
            if core != KERNEL and plan["pps_steps"]:   # a TCG guest's packet rate is not the link's: none there
                doc["pps"] = _pps_case(wire, plan, core)
            per_core[core] = _summarise(doc)
        if not args.no_load:
            hogs = [reg.spawn([sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(os.cpu_count() or 1)]
            try:
                for core in modelled:
                    wire = wires[KERNEL if core == KERNEL else "userspace"]
                    console.print(f"[bold]link backend {core} with {len(hogs)} competing busy loops[/bold]")
                    doc = {"delay_cases": [_delay_case(wire, d, plan, core) for d in plan["loaded_delays_s"]],
                           "gap_cases": [_gap_case(wire, r, plan, core) for r in plan["loaded_rates_bps"]]}
                    loaded[core] = _summarise(doc)
            finally:
                for h in hogs:
                    h.kill()
                    h.wait()
            loaded["load"] = f"{len(hogs)} busy loops (one per CPU, nice 0)"
        for w in wires.values():
            w.stop()
        for server in servers:
            server.terminate()
        softirq_raised = reg.softirq_raised
    first = per_core[cores[0]]
    report = {"backend": "userspace", "core": first["core"], "profile": "slow-cpu" if args.slow_cpu else "host",
              "quick": bool(args.quick)}
    for key in ("delay_cases", "gap_cases", "red", "pps", "delay_p99_error_pct", "gap_p99_error_pct",
                "red_max_abs_error", "max_pps", "max_pps_on_time", "cpu_per_packet_us"):
        if key in first:
            report[key] = first[key]
    report["cores"] = per_core
    report["comparison"] = _comparison(per_core)
    report["loaded"] = loaded
    report["workdir"] = str(workdir)
    report["locked"] = not args.no_lock
    report["load_average"] = load_average()
    report["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    report["machine"] = _machine()
    report["softirq_threads_raised"] = softirq_raised  # ksoftirqd above the link cores (testbed.emu.softirq)
    (workdir / "bench-link.json").write_text(json.dumps(report, indent=1))
    if args.markdown:
        from testbed.bench.link_table import markdown

        Path(args.markdown).write_text(markdown(report))
    if args.json:
        print_json(report)
    else:
        _print(report)
    return 0


def _summarise(doc: dict) -> dict:
    """The headline figures of one core's cases (pure)."""
    if doc.get("delay_cases"):
        doc["delay_p99_error_pct"] = max(c["p99_error_pct"] for c in doc["delay_cases"])
    if doc.get("gap_cases"):
        doc["gap_p99_error_pct"] = max(c["p99_error_pct"] for c in doc["gap_cases"])
    if "red" in doc:
        doc["red_max_abs_error"] = max((b["abs_error"] for b in doc["red"]["bins"]), default=None)
    if "pps" in doc:
        doc["max_pps"] = doc["pps"]["max_pps"]
        doc["max_pps_on_time"] = doc["pps"]["max_pps_on_time"]
        doc["cpu_per_packet_us"] = doc["pps"]["cpu_per_packet_us"]
    return doc


def _comparison(per_core: dict) -> dict:
    """On-time rates side by side and the ratios the issue's targets are stated in (pure)."""
    on_time = {c: d.get("max_pps_on_time") for c, d in per_core.items()}
    out = {"max_pps_on_time": on_time,
           "cpu_per_packet_us": {c: d.get("cpu_per_packet_us") for c, d in per_core.items()}}
    for a, b in (("c", "bare"), ("c", "python")):
        if on_time.get(a) is not None and on_time.get(b):
            out[f"{a}_over_{b}"] = round(on_time[a] / on_time[b], 3)
    return out


def _check_kernel() -> None:
    """One line when this kernel lacks netem or RED (doctor's own probes, which try them)."""
    from testbed.doctor import capabilities
    from testbed.errors import UsageError

    caps = capabilities()["capabilities"]
    missing = [n for n in ("netem", "red") if not caps[n]["present"]]
    if missing:
        raise UsageError(f"--kernel: this kernel has no {' or '.join('sch_' + m for m in missing)} "
                         "(testbed doctor); run it in the test VM (sudo make link-fidelity) or drop --kernel")


def _machine() -> dict:
    """What the figures were measured on: CPUs, kernel, and whether this is a QEMU guest (TCG or KVM)."""
    vendor = Path("/sys/class/dmi/id/sys_vendor")
    cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace") if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "")
    return {"cpus": os.cpu_count(), "kernel": os.uname().release, "cpu_model": model,
            "vendor": vendor.read_text().strip() if vendor.exists() else "",
            "host": os.environ.get("TESTBED_VM_HOST", "")}


def _late(stats: dict) -> dict:
    from testbed.links.accounting import lateness_percentiles

    d = stats.get("directions", {}).get("a>b", {})
    return {"emulator_late": d.get("emulator_late"), "max_lateness_us": round(d.get("max_lateness_s", 0) * 1e6, 1),
            "rx_kernel_drops": stats.get("rx_kernel_drops"), "realtime": stats.get("realtime"),
            "core": stats.get("core"), "lateness_us": lateness_percentiles(d)}


def _start(wire, params: LinkParams, seed: int, core: str) -> None:
    wire.restart(params, seed=seed, core=core, cpu=getattr(wire, "bench_cpu", None))


def _delay_case(wire, delay_s: float, plan: dict, core: str) -> dict:
    rate = plan.get("delay_rate_bps", DELAY_RATE_BPS)
    _start(wire, LinkParams(rate_bps=rate, delay_s=delay_s), 1, core)
    with wire.capture("a", PROBE_PORT, f"delay{delay_s * 1e3:g}ms-a") as pa, \
            wire.capture("b", PROBE_PORT, f"delay{delay_s * 1e3:g}ms-b") as pb:
        wire.probe(plan["probes"], plan["probe_pps"], size=FRAME - 42, port=PROBE_PORT)
    stats = wire.stop()
    sent, got = probe_arrivals(read_pcap(pa), PROBE_PORT), probe_arrivals(read_pcap(pb), PROBE_PORT)
    ideal = delay_s + fidelity.serialisation_s(FRAME, rate)
    delays = fidelity.one_way_delays(sent, got)
    # each probe against the ideal link fed the probes as they left A: a sender held back by other load
    # bunches them, and the wait behind each other is the model's, not an error (fidelity.ideal_link_delays)
    ideals = fidelity.ideal_link_delays(sent, rate, delay_s)
    case = {"delay_ms": delay_s * 1e3, "ideal_ms": round(ideal * 1e3, 4), "sent": len(sent),
            "min_ms": round(min(delays) * 1e3, 4) if delays else None,
            "median_ms": round(fidelity.percentile(delays, 50) * 1e3, 4),
            "queued_probes": sum(v > ideal * 1.001 for v in ideals.values()),
            "idle_link_p99_error_pct": round(fidelity.percentile(fidelity.relative_errors(delays, ideal), 99) * 100, 3),
            **fidelity.error_summary(fidelity.delay_errors(sent, got, ideals)), **_late(stats)}
    console.print(f"{core}: delay {delay_s * 1e3:g} ms: p99 error {case['p99_error_pct']}% over {case['samples']} probes")
    return case


def _gap_case(wire, rate_bps: float, plan: dict, core: str) -> dict:
    """Gaps of a backlogged link against ``1514*8/rate`` (the source: :mod:`testbed.bench.gap_source`)."""
    wait_tcp_quiet(wire)   # an earlier case's connection closes on the link that carried it, not in this ledger
    _start(wire, LinkParams(rate_bps=rate_bps, delay_s=0.001, limit=200), 2, core)
    backlog = offer_backlog(wire, rate_bps, plan["gap_seconds"], f"gaps{rate_bps / 1e6:g}M")
    stats = wire.stop()
    arrivals = backlog.arrivals_ns
    # every frame on the way: offered by the source, received by the line, sent by it, captured at B (a
    # frame missing between two of them is a gap the line did not make)
    path = frame_ledger(backlog.offered, stats.get("directions", {}).get("a>b", {}), len(arrivals))
    ideal = fidelity.serialisation_s(FRAME, rate_bps)
    gaps = fidelity.backlogged_gaps(arrivals, skip=50)
    # delivered rate over the backlogged stretch: late wake-ups stretch some gaps and bunch others
    span = sum(gaps)
    case = {"rate_mbps": rate_bps / 1e6, "ideal_gap_us": round(ideal * 1e6, 2),
            "source": backlog.source, "frames": path,
            "median_gap_us": round(fidelity.percentile(gaps, 50) * 1e6, 2),
            "rate_pct": round(100 * len(gaps) * FRAME * 8 / span / rate_bps, 2) if span else None,
            **fidelity.error_summary(fidelity.relative_errors(gaps, ideal)), **_late(stats)}
    console.print(f"{core}: gaps at {rate_bps / 1e6:g} Mbit/s: p99 error {case['p99_error_pct']}% over {case['samples']} gaps")
    return case


def _red_case(wire, plan: dict, core: str, seed: int = RED_SEED) -> dict:
    """ECT probes into a RED queue; ``seed`` draws the marks (``testbed validate`` gives each run its own)."""
    rate, delay = plan.get("red_rate_bps", 10e6), 0.001
    red = RedParams(kmin=10, kmax=50, pmax=0.5, unit="packets")
    _start(wire, LinkParams(rate_bps=rate, delay_s=delay, limit=70, red=red), seed, core)
    pps = 1.1 * rate / (FRAME * 8)
    sent, result = wire.probe(plan["red_probes"], pps, size=FRAME - 42, tos=0x02, port=PROBE_PORT)
    stats = wire.stop()
    s = summarise(result, sent["sent"])
    ser = fidelity.serialisation_s(FRAME, rate)
    depths = [fidelity.queue_depth(d, delay + ser, ser) for d in s["delays_s"]]
    bins = fidelity.red_bins(depths, [e == 3 for e in result["ecn"]], red)
    console.print(f"{core}: RED: {s['ce']} CE of {s['received']} probes; max |observed - curve| "
                  f"{max((b['abs_error'] for b in bins), default=float('nan')):.3f} over {len(bins)} depth bins")
    return {"kmin": red.kmin, "kmax": red.kmax, "pmax": red.pmax, "unit": red.unit, "rate_mbps": rate / 1e6,
            "link_seed": seed, "sent": sent["sent"], "received": s["received"], "ce": s["ce"], "lost": s["lost"], "bins": bins,
            "marked": _sum(stats, "ce_marked"), "dropped": _sum(stats, "drop_tail") + _sum(stats, "drop_red"),
            **_late(stats)}


def _sum(stats: dict, key: str, direction: str = "a>b") -> int:
    return int(stats.get("directions", {}).get(direction, {}).get(key, 0) or 0)


def _loss_case(wire, plan: dict, core: str) -> dict:
    """1 % random loss, no rate: measured loss against the configured rate (z-score of a binomial draw) and
    every lost probe against the backend's loss counter (netem's drops, the link node's ``drop_loss``)."""
    _start(wire, LinkParams(loss=LossModel(rate=LOSS_RATE)), 5, core)
    sent, result = wire.probe(plan["loss_probes"], plan["loss_pps"], size=64, port=PROBE_PORT,
                              timeout=plan["loss_probes"] / plan["loss_pps"] * 3 + 30)
    stats = wire.stop()
    s = summarise(result, sent["sent"])
    n = sent["sent"]
    sd = math.sqrt(n * LOSS_RATE * (1 - LOSS_RATE))
    counted = _sum(stats, "drop_loss")
    case = {"configured_pct": LOSS_RATE * 100, "sent": n, "lost": s["lost"], "loss_pct": round(100 * s["loss"], 3),
            "z": round((s["lost"] - n * LOSS_RATE) / sd, 2) if sd else None, "counted_by_backend": counted,
            "unattributed": s["lost"] - counted, **_late(stats)}
    console.print(f"{core}: loss: {s['lost']} of {n} probes ({case['loss_pct']}%, z {case['z']}); "
                  f"{counted} counted by the backend")
    return case


def _offer(wire, pps: int, seconds: float) -> tuple[int, float, str]:
    """Offer 106-byte frames (64 B of UDP payload) A -> B at ``pps`` (0: as fast as possible).

    The source is the compiled core's ``gen`` mode (AF_PACKET sendmmsg): iperf3 tops out near 50 kpps of
    small datagrams on this machine, below the rates to measure. iperf3 remains the source when the core
    did not build. Returns (frames offered, seconds, source).
    """
    binary = gen_binary()
    if binary is None:
        rate = "0" if pps == 0 else str(int(pps * 64 * 8))  # iperf3 -b counts payload bits; 0 = unlimited
        out = subprocess.run(wire.exec_argv("a", ["iperf3", "-c", wire.ip_b, "-p", str(IPERF_PORT), "-u", "-b", rate,
                                                  "-l", "64", "-t", str(seconds), "-J"]),
                             capture_output=True, text=True, timeout=60, check=True)
        end = json.loads(out.stdout)["end"]["sum"]
        return int(end["packets"]), float(end["seconds"]), "iperf3"
    out = subprocess.run(wire.exec_argv("a", [str(binary), "gen", "--a", wire.if_a, "--pps", str(pps or 10_000_000),
                                              "--seconds", str(seconds), "--size", str(PPS_FRAME)]),
                         capture_output=True, text=True, timeout=60, check=True)
    doc = json.loads(out.stdout)
    return int(doc["sent"]), float(doc["seconds"]), "linkcore-gen"


def _pps_case(wire, plan: dict, core: str) -> dict:
    """Offer small frames at rising rates. ``max_pps``: the highest rate forwarded whole (no kernel
    receive drops, >= 98% forwarded); ``max_pps_on_time``: and with < 1% of frames late. CPU per packet:
    the link process's CPU time over the frames it received (both directions), at the on-time maximum."""
    steps = []
    for pps in plan["pps_steps"]:
        _start(wire, LinkParams(), 4, core)
        offered, seconds, source = _offer(wire, pps, plan["pps_seconds"])
        stats = wire.stop()
        d = stats["directions"]["a>b"]
        rx = sum(x["rx_packets"] for x in stats["directions"].values())
        step = {"offered_pps": round(offered / seconds), "forwarded_pps": round(d["tx_packets"] / seconds),
                "late_fraction": round(d["emulator_late"] / max(1, d["tx_packets"]), 4),
                "source": source, "cpu_s": stats.get("cpu_s"),
                "cpu_per_packet_us": round(stats["cpu_s"] / rx * 1e6, 3) if stats.get("cpu_s") and rx else None,
                **_late(stats)}
        step["whole"] = step["rx_kernel_drops"] == 0 and d["tx_packets"] >= 0.98 * offered
        step["on_time"] = step["whole"] and step["late_fraction"] < 0.01
        console.print(f"{core}: pps: offered {step['offered_pps']:,}, forwarded {step['forwarded_pps']:,}, "
                      f"late {step['late_fraction']:.2%}, CPU {step['cpu_per_packet_us']} us/packet, "
                      f"whole {step['whole']}, on time {step['on_time']}")
        steps.append(step)
    on_time = [s for s in steps if s["on_time"]]
    best = max(on_time, key=lambda s: s["forwarded_pps"], default=None)
    return {"max_pps": max((s["forwarded_pps"] for s in steps if s["whole"]), default=0),
            "max_pps_on_time": best["forwarded_pps"] if best else 0,
            "cpu_per_packet_us": best["cpu_per_packet_us"] if best else None,
            "max_forwarded_pps": max(s["forwarded_pps"] for s in steps), "steps": steps,
            "cpu_count": os.cpu_count()}


def _print(report: dict) -> None:
    from rich.table import Table

    from testbed.bench.link_table import rows

    header, body = rows(report)
    t = Table(title=f"link emulation fidelity, side by side ({report['uptime']})")
    for h in header:
        t.add_column(h)
    for r in body:
        t.add_row(*r)
    out.print(t)
    cmp = report["comparison"]
    out.print(f"c / bare on-time rate: {cmp.get('c_over_bare')}; c / python: {cmp.get('c_over_python')}; "
              f"RED max |observed - curve|: {report.get('red_max_abs_error')}; details in "
              f"{report['workdir']}/bench-link.json")
    if report.get("softirq_threads_raised") is not None:
        out.print(f"ksoftirqd threads raised above the link cores for the run: {report['softirq_threads_raised']} "
                  "(testbed/emu/softirq.py)")
