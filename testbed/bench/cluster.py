"""``testbed bench cluster``: issue 19's two numbers for a partitioned replica, measured in test VMs.

    config A: VM a (1 vCPU)  -- coordinator + ONE worker (itself, over SSH): the whole fat-tree k=4
    config B: VM a + VM b (1 vCPU each) -- coordinator in a, worker 0 in a, worker 1 in b: the same
              spec split in two, the 8 cut links as VXLAN tunnels over the VMs' socket link

Both through the same code path (`testbed cluster run` in VM a), one after the other in the same two VMs
(A leaves b idle), same spec, scale and traffic. Why VMs with one vCPU each: this host has 2 cores, so
"one machine" vs "two machines" is only fair when each machine is one core; a TCG guest is that core.

* **Build time**: the coordinator's timings (``build_s``: every part built; ``up_s``: connect ->
  synchronised start), B over A; goal <= 1.5.
* **Packets per second**: ``--udp-flows`` concurrent iperf3 UDP flows of 64 B datagrams between host pairs
  across the fabric's 2-way cut (in B every flow crosses machines), links off (no shaping: the emulator is
  the limit), each offered ``--udp-kpps``; delivered pps summed, B over A; goal >= 1.7 *at equal
  emulator health*: each worker's CPU busy share during the traffic (guest /proc/stat). Health differing
  by more than HEALTH_TOLERANCE is said in the verdict, not hidden.

Results: ``results/bench-cluster/<timestamp>/bench-cluster.json`` (the raw runs under ``a/A`` and ``a/B``).
"""

from __future__ import annotations

import datetime as _dt
import json
import shlex
from pathlib import Path

from testbed.console import console, out, print_json, require_root
from testbed.errors import EmulationError, SpecError

BUILD_GOAL = 1.5      # partitioned build <= 1.5x the single-machine build
PPS_GOAL = 1.7        # 2 workers >= 1.7x the packets per second of 1
HEALTH_TOLERANCE = 0.10   # CPU busy shares within this are "equal health"
SATURATED = 0.95


def register(sub) -> None:
    p = sub.add_parser("cluster", help="partitioned replica: 2 workers vs 1, build time and pps (test VMs)",
                       description=__doc__)
    p.add_argument("--udp-flows", type=int, default=8, metavar="N", help="concurrent UDP flows (default 8)")
    p.add_argument("--udp-kpps", type=float, default=2.0, metavar="K", help="offered kpps per flow (default 2)")
    p.add_argument("--seconds", type=float, default=10.0, metavar="S", help="traffic duration (default 10)")
    p.add_argument("--cpus", type=int, default=1, metavar="N", help="vCPUs per VM (default 1: one core each)")
    p.add_argument("--out", metavar="DIR", help="results folder (default results/bench-cluster/<timestamp>)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=_main)


def check_args(args, G) -> None:
    """One line naming the flag for a bad value (before anything boots)."""
    from testbed.cluster.checks import check_udp_load
    from testbed.cluster.partition import DEFAULT_IMBALANCE

    check_udp_load(G, DEFAULT_IMBALANCE, args.udp_flows, args.udp_kpps)
    if not 2 <= args.seconds <= 600:
        raise SpecError("--seconds", f"expected 2 <= S <= 600, got {args.seconds:g}")
    if not 1 <= args.cpus <= 2:
        raise SpecError("--cpus", f"expected 1 or 2 vCPUs per VM (this comparison is one core per machine), "
                                  f"got {args.cpus}")


def health(doc: dict) -> float | None:
    """The busiest worker's CPU share during the traffic (None when not measured)."""
    busy = [b for b in (doc.get("udp_load") or {}).get("cpu_busy", {}).values() if b is not None]
    return max(busy) if busy else None


def compare(a: dict, b: dict) -> dict:
    """Ratios and verdicts from the results.json of config A (1 worker) and B (2 workers)."""
    def ratio(x, y):
        return round(y / x, 3) if x and y is not None else None

    ta, tb = a.get("timings", {}), b.get("timings", {})
    la, lb = a.get("udp_load") or {}, b.get("udp_load") or {}
    build = {k: {"a_s": ta.get(k), "b_s": tb.get(k), "ratio": ratio(ta.get(k), tb.get(k))}
             for k in ("build_s", "up_s")}
    for v in build.values():
        v["goal_met"] = v["ratio"] is not None and v["ratio"] <= BUILD_GOAL
    ha, hb = health(a), health(b)
    equal = ha is not None and hb is not None and abs(ha - hb) <= HEALTH_TOLERANCE
    pps = {"a_pps": la.get("delivered_pps"), "b_pps": lb.get("delivered_pps"),
           "ratio": ratio(la.get("delivered_pps"), lb.get("delivered_pps")),
           "a_busy": ha, "b_busy": hb, "health_equal": equal}
    pps["goal_met"] = pps["ratio"] is not None and pps["ratio"] >= PPS_GOAL and equal
    pps["health_note"] = health_note(ha, hb, equal) + loss_note(la.get("loss_pct"), lb.get("loss_pct"))
    return {"build": build, "pps": pps, "goals": {"build_ratio_max": BUILD_GOAL, "pps_ratio_min": PPS_GOAL}}


def health_note(ha, hb, equal: bool) -> str:
    if ha is None or hb is None:
        return "CPU busy not measured"
    state = {True: "saturated", False: "not saturated"}
    text = f"busiest worker CPU {ha:.2f} (A) vs {hb:.2f} (B)"
    if equal:
        return f"equal health: {text}"
    return f"UNEQUAL health: {text}; A {state[ha >= SATURATED]}, B {state[hb >= SATURATED]}"


def loss_note(a, b) -> str:
    """Loss is part of the picture: one saturated machine slows its own senders (little loss), while
    two machines' senders can run ahead of the other machine's receivers (loss at the receiving end)."""
    if a is None or b is None:
        return ""
    return f"; loss {a:g} % (A) vs {b:g} % (B)"


def _cell(x, fmt="{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def table(a: dict, b: dict, cmp: dict) -> list[str]:
    la, lb = a.get("udp_load") or {}, b.get("udp_load") or {}
    rows = [("", "A: 1 worker", "B: 2 workers", "B/A", "goal")]
    for key, label in (("build_s", "parts built (s)"), ("up_s", "up: connect..start (s)")):
        v = cmp["build"][key]
        rows.append((label, _cell(v["a_s"]), _cell(v["b_s"]), _cell(v["ratio"], "{:.2f}"),
                     f"<= {BUILD_GOAL} {'met' if v['goal_met'] else 'NOT met'}"))
    p = cmp["pps"]
    rows.append(("UDP asked (pps)", _cell(la.get("asked_pps"), "{:.0f}"), _cell(lb.get("asked_pps"), "{:.0f}"), "", ""))
    rows.append(("UDP offered (pps)", _cell(la.get("offered_pps"), "{:.0f}"), _cell(lb.get("offered_pps"), "{:.0f}"),
                 "", ""))
    rows.append(("UDP delivered (pps)", _cell(p["a_pps"], "{:.0f}"), _cell(p["b_pps"], "{:.0f}"),
                 _cell(p["ratio"], "{:.2f}"), f">= {PPS_GOAL} {'met' if p['goal_met'] else 'NOT met'}"))
    rows.append(("loss (%)", _cell(la.get("loss_pct")), _cell(lb.get("loss_pct")), "", ""))
    busy = [", ".join(_cell(x, "{:.2f}") for x in (d.get("udp_load") or {}).get("cpu_busy", {}).values()) or "-"
            for d in (a, b)]
    rows.append(("CPU busy per worker", busy[0], busy[1], "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows] + [p["health_note"]]


def _run_config(vm, name: str, extra: str, args) -> dict:
    from testbed.cluster.vms import SPEC

    cmd = (f"testbed cluster run {SPEC} {extra} --links off --no-checks --udp-flows {args.udp_flows} "
           f"--udp-kpps {args.udp_kpps:g} --iperf-seconds {args.seconds:g} --out /mnt/out/{name}")
    res = vm.run(f"{cmd} > /mnt/out/{name}.log 2>&1", timeout=2400, check=False)
    path = vm.out / name / "results.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    return {**doc, "command": cmd, "rc": res.rc, "log": str(vm.out / f"{name}.log")}


def _main(args) -> int:
    import subprocess

    from testbed.cluster.vms import IDENTITY, KNOWN_HOSTS, cluster_vms, worker
    from testbed.emu.cpustat import load_average
    from testbed.emu.vmimage import VMError, ensure_image
    from testbed.scenario import _check_creatable
    from testbed.topo.spec import build_graph, load_spec, resolve_spec

    check_args(args, build_graph(load_spec(resolve_spec("fat-tree-k4"))))
    out_dir = Path(args.out) if args.out else Path("results") / "bench-cluster" / _dt.datetime.now().strftime(
        "%Y%m%d-%H%M%S")
    _check_creatable(out_dir, "--out")
    require_root("testbed bench cluster")
    doc: dict = {"host_uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
                 "host_load_before": load_average(), "vm_cpus": args.cpus, "udp_flows": args.udp_flows,
                 "udp_kpps": args.udp_kpps, "seconds": args.seconds, "started": _dt.datetime.utcnow().isoformat()}
    try:
        image, _ = ensure_image()
        with cluster_vms(image, out_dir, cpus=args.cpus) as g:
            doc["accel"] = g.accel
            a = g["a"]
            console.print("bench cluster: config A (one worker: VM a builds the whole fabric)")
            doc["A"] = _run_config(a, "A", f"--workers {worker('a')} --known-hosts {KNOWN_HOSTS} "
                                           f"--identity {shlex.quote(IDENTITY)}", args)
            console.print("bench cluster: config B (two workers: VM a and VM b, the fabric split in two)")
            doc["B"] = _run_config(a, "B", "", args)
    except VMError as exc:
        raise EmulationError(f"bench cluster: {exc}") from None
    doc["host_uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    doc["compare"] = cmp = compare(doc["A"], doc["B"])
    (out_dir / "bench-cluster.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    if args.json:
        print_json(doc)
    else:
        out.print(f"fat-tree k=4, links off, {args.udp_flows} UDP flows x {args.udp_kpps:g} kpps asked, "
                  f"64 B, {args.seconds:g} s; QEMU {doc['accel']}, {args.cpus} vCPU per VM", highlight=False)
        for line in table(doc["A"], doc["B"], cmp):
            out.print(line, highlight=False, markup=False)
        out.print(f"host before: {doc['host_uptime_before']}\nhost after:  {doc['host_uptime_after']}",
                  highlight=False)
    console.print(f"bench cluster: results in {out_dir}")
    ok = all(d.get("rc") == 0 and d.get("passed") for d in (doc["A"], doc["B"]))
    if not ok:
        console.print(f"[red]bench cluster: a run failed (A rc {doc['A']['rc']}, B rc {doc['B']['rc']}); "
                      f"logs: {doc['A']['log']}, {doc['B']['log']}[/red]")
    return 0 if ok else 1
