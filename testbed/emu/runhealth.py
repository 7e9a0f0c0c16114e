"""The ``emulator_ok`` block every run writes into ``metrics.json`` and says on the console (pure).

Why one function: each scenario watches different things (link nodes with a lateness histogram, a frame
ledger, OVS or BMv2 processes, only the machine), but a reader of any run needs the same answer in the
same place: was the emulator, not the system under test, the limit? :func:`assess` turns whatever a run
has into::

    {"emulator_ok": bool,
     "emulator": {"reasons": [...],                 # empty: healthy
                  "late_fraction": 0.001 | None,    # link nodes' frames sent late (None: no link node)
                  "lateness_us": {link: {direction: {p50, p99, p99.9}}},
                  "unaccounted": 0 | None,          # frames lost without a counted cause (None: not accounted)
                  "lost_inside_emulator": 0 | None, # socket/ring/interface drops (None: not counted)
                  "machine": {"busy", "host_steal", "switch_max"} | None,
                  "timers": {"policy", "stalled_fraction", "lateness_us", "stalls", ...} | None,
                  "cpu": {process: {cpu_s, wall_s, cpu_fraction}}, "own_cores": 0.8 | None}}

:func:`combine` joins the blocks of a run's trials or parts (healthy only when all are), :func:`line` is
the one console line; :func:`timer_stall_reason` is how a run without a link node is judged by the
machine's timers (:mod:`testbed.emu.timerprobe`, beside every :class:`testbed.emu.health.CpuWatch`).
``Results.health`` (testbed/scenario.py) is how a scenario calls them.
"""

from __future__ import annotations

from testbed.links.accounting import MAX_LATE_FRACTION, lateness_percentiles, link_node_processes

#: Above this share of the CPU time taken by the hypervisor, timing is the host's, not the model's: the
#: link cores' late fraction tracks the steal (docs/pfc.md, "Lateness": 1.3 % late at 1.1 % steal, 5.7 %
#: at 5.4 %), and tc/OVS timers slip the same way.
MAX_STEAL = 0.05
#: Share of a run in which the machine's timers fired late beyond the probe's tolerance (the
#: ``stalled_fraction`` of :mod:`testbed.emu.timerprobe`) above which a run without a link node is not
#: trusted: the link node's own bound on late frames. The probe's tolerance is the link node's late
#: tolerance and its figure the share of evenly spread timers that fired later, so it is the late
#: fraction a link node would have reported had the machine's timers been its only limit; tc
#: netem/tbf, OVS and BMv2 time their work with the same kernel timers, and nothing in them says so.
MAX_STALLED_FRACTION = MAX_LATE_FRACTION
#: Machine busy (keep-awake spinners left out) at or above which a run without a lateness measure (no link
#: node) cannot show that the emulator kept up -- the same bound as :func:`testbed.emu.health.saturation`.
MAX_BUSY = 0.95


def assess(*, cpu: dict | None = None, link_stats: dict | None = None, ledger: dict | None = None,
           unaccounted: int | None = None, lost_inside: int | None = None, reasons=(), cut=()) -> dict:
    """``{"emulator_ok", "emulator"}`` of one run or trial from the evidence it has.

    Args:
        cpu: :meth:`testbed.emu.health.CpuWatch.summary` over the measured part (machine busy, host steal,
            per-process CPU).
        link_stats: {name: a link node's stats document} (both cores write the same keys): lateness
            percentiles per direction, the late fraction, frames lost in the node's sockets, its CPU.
        cut: names of link nodes the run took down on purpose (a cable cut): frames they could not send
            while down went with the cut (modelled), so their send errors are not the emulator's losses.
        ledger: :func:`testbed.links.accounting.emulator_health`'s result, when the run keeps the full
            frame ledger (its late fraction, lateness, losses, CPU and reasons are taken as they are).
        unaccounted, lost_inside: the run's own frame ledger's figures (None: the run does not count them).
        reasons: the scenario's own reasons to distrust the run (already judged; kept first).
    """
    ev = {"reasons": [], "late_fraction": None, "lateness_us": {}, "unaccounted": unaccounted,
          "lost_inside_emulator": lost_inside, "machine": None, "timers": None, "cpu": {}, "own_cores": None}
    if ledger:
        ev.update({k: ledger.get(k) for k in ("late_fraction", "lateness_us", "unaccounted", "cpu", "own_cores")})
        ev["lost_inside_emulator"] = ledger.get("lost_inside_emulator")
    if link_stats:
        _links(ev, link_stats, set(cut))
    if cpu:
        ev["machine"] = {"busy": round(cpu.get("machine_mean", 0.0) / 100, 3), "host_steal": cpu.get("host_steal", 0.0),
                         "switch_max": round(cpu.get("switch_max", 0.0) / 100, 3)}
        ev["timers"] = cpu.get("timers")
        for name, p in (cpu.get("processes") or {}).items():
            ev["cpu"].setdefault(name, _fraction(p))
    if ev["cpu"] and ev["own_cores"] is None:
        ev["own_cores"] = round(sum(p.get("cpu_fraction") or 0.0 for p in ev["cpu"].values()), 2)
    why = list(dict.fromkeys(reasons))
    why += [r for r in (ledger or {}).get("reasons", []) if r not in why]
    why += [text for topic, text in _judge(ev) if not any(topic in w for w in why)]   # each said once
    ev["reasons"] = why
    return {"emulator_ok": not why, "emulator": ev}


def _links(ev: dict, link_stats: dict, cut: set) -> None:
    """Lateness, losses in the nodes' sockets and CPU of the link nodes, into ``ev``."""
    sent = late = lost = 0
    for name, doc in link_stats.items():
        dirs = doc.get("directions", {})
        ev["lateness_us"][name] = {d: lateness_percentiles(x) for d, x in dirs.items()}
        sent += sum(x.get("tx_packets", 0) for x in dirs.values())
        late += sum(x.get("emulator_late", 0) for x in dirs.values())
        lost += doc.get("rx_kernel_drops", 0) + (0 if name in cut else sum(x.get("tx_errors", 0) for x in dirs.values()))
    ev["late_fraction"] = round(late / sent, 5) if sent else 0.0
    if ev["lost_inside_emulator"] is None:
        ev["lost_inside_emulator"] = lost
    for name, p in link_node_processes(link_stats).items():
        ev["cpu"][name] = _fraction(p)


def _fraction(p: dict) -> dict:
    cpu_s, wall_s = p.get("cpu_s"), p.get("wall_s")
    return {**p, "cpu_fraction": round(cpu_s / wall_s, 3) if cpu_s is not None and wall_s else None}


def link_node_measured(ev: dict) -> bool:
    """Whether a link node measured its own lateness in the run (a frame ledger without link nodes still
    says 0.0 late: no link node, no measure)."""
    return ev.get("late_fraction") is not None and bool(ev.get("lateness_us"))


def timer_stall_reason(timers: dict | None) -> str | None:
    """The reason to distrust a run without a link node whose machine's timers stalled (None: they did not,
    or were not measured): the timer probe's ``stalled_fraction`` above :data:`MAX_STALLED_FRACTION`.

    Only a SCHED_FIFO probe's figure is judged: a normal-policy probe (not root) waits for the CPU behind
    every busy task, which a kernel timer does not -- beside 3 busy loops on this 2-core guest its
    stalled_fraction read 4.6 % where a SCHED_FIFO one read 0.013 % (docs/architecture.md "Timer stalls").
    """
    timers = timers or {}
    stalled = timers.get("stalled_fraction")
    if stalled is None or stalled <= MAX_STALLED_FRACTION or not str(timers.get("policy", "")).startswith("SCHED_FIFO"):
        return None
    return (f"timers stalled {stalled:.1%} of the run (> {MAX_STALLED_FRACTION:.0%}): tc/OVS/BMv2 timing is "
            "the machine's")


def _judge(ev: dict) -> list[tuple[str, str]]:
    """The reasons the evidence itself gives, each with its topic (empty: healthy). A run with a link node
    is judged by its late frames; one without by the timer probe and the machine's CPU."""
    why = []
    if ev["unaccounted"]:
        why.append(("without a counted cause", f"{ev['unaccounted']} frames lost without a counted cause"))
    if ev["lost_inside_emulator"]:
        why.append(("inside the emulator", f"{ev['lost_inside_emulator']} frames lost inside the emulator "
                                           "(sockets, rings, interfaces)"))
    if ev["late_fraction"] is not None and ev["late_fraction"] > MAX_LATE_FRACTION:
        why.append(("frames late", f"{ev['late_fraction']:.2%} of link-node frames late (> {MAX_LATE_FRACTION:.0%})"))
    m = ev["machine"] or {}
    if m.get("host_steal", 0.0) > MAX_STEAL:
        why.append(("host steal", f"the hypervisor took {m['host_steal']:.1%} of the CPU time "
                                  f"(host steal > {MAX_STEAL:.0%})"))
    measured = link_node_measured(ev)
    stalled = None if measured else timer_stall_reason(ev.get("timers"))
    if stalled:
        why.append(("timers stalled", stalled))
    if not measured and m.get("busy", 0.0) >= MAX_BUSY:
        why.append(("machine CPU", f"machine CPU {m['busy']:.0%} busy, and no lateness measure to show "
                                   "the emulator kept up"))
    return why


def combine(parts: dict) -> dict:
    """One block from the blocks of a run's trials or parts (``{label: block}``): healthy only when every
    part is; reasons prefixed with their part; the worst late fraction and steal, the summed losses, each
    part's evidence under ``parts``."""
    evs = {k: b["emulator"] for k, b in parts.items()}

    def total(key):
        values = [e[key] for e in evs.values() if e.get(key) is not None]
        return sum(values) if values else None

    def worst(values):
        values = [v for v in values if v is not None]
        return max(values) if values else None

    machines = [e["machine"] for e in evs.values() if e.get("machine")]
    timers = [{**e["timers"], "part": k} for k, e in evs.items()
              if (e.get("timers") or {}).get("stalled_fraction") is not None]
    ev = {"reasons": [f"{k}: {r}" for k, e in evs.items() for r in e["reasons"]],
          "late_fraction": worst(e.get("late_fraction") for e in evs.values()),
          "lateness_us": {f"{k}: {n}": v for k, e in evs.items() for n, v in (e.get("lateness_us") or {}).items()},
          "unaccounted": total("unaccounted"), "lost_inside_emulator": total("lost_inside_emulator"),
          "machine": {key: worst(m.get(key) for m in machines) for key in ("busy", "host_steal", "switch_max")}
          if machines else None,
          "timers": max(timers, key=lambda t: t["stalled_fraction"], default=None),   # the worst part's, named
          "cpu": {}, "own_cores": worst(e.get("own_cores") for e in evs.values()),
          "parts": evs}
    return {"emulator_ok": all(b["emulator_ok"] for b in parts.values()), "emulator": ev}


def line(block: dict) -> str:
    """The run's health in one console line: the verdict, then its evidence (or its reasons)."""
    ev = block["emulator"]
    bits = []
    if ev.get("late_fraction") is not None:
        p99 = [d.get("p99") for dirs in ev.get("lateness_us", {}).values() for d in dirs.values()
               if d.get("p99") is not None]
        bits.append(f"late {ev['late_fraction']:.2%}" + (f" (p99 <= {max(p99):g} us)" if p99 else ""))
    if ev.get("unaccounted") is not None:
        bits.append(f"unaccounted {ev['unaccounted']}")
    if ev.get("lost_inside_emulator") is not None:
        bits.append(f"lost inside {ev['lost_inside_emulator']}")
    if ev.get("machine"):
        bits.append(f"machine {ev['machine']['busy']:.0%} busy, steal {ev['machine']['host_steal']:.1%}")
    t = ev.get("timers") or {}
    if t.get("stalled_fraction") is not None:
        bits.append(f"timers stalled {t['stalled_fraction']:.2%} (p99 {t['lateness_us']['p99']} us, "
                    f"{t['stalls']} over {t['stall_ms']:g} ms, {t['policy']})")
    if ev.get("own_cores") is not None:
        bits.append(f"own CPU {ev['own_cores']:.2f} cores")
    head = f"emulator_ok: {block['emulator_ok']}"
    if ev["reasons"]:
        head += " -- " + "; ".join(ev["reasons"][:3]) + (f" (+{len(ev['reasons']) - 3} more)"
                                                          if len(ev["reasons"]) > 3 else "")
    return head + (f" [{'; '.join(bits)}]" if bits else "")
