"""A replica plan as JSON (``plan.json``, ``testbed plan --json``) and as tables (``testbed plan``).

The JSON keeps real and emulated quantities under separate keys (``real``/``emulated``,
``real_*``/``emulated_*``), in SI units (bit/s, seconds, bytes, packets).
"""

from __future__ import annotations

from testbed.units import format_duration, format_rate


def _lp(lp) -> dict:
    doc = lp.to_dict()
    doc["describe"] = lp.describe()
    return doc


def link_delays(plan, tiers) -> dict:
    """``"u-v"`` -> tier, length, real and emulated one-way delay (ms) and backend of each link of ``tiers``:
    what a scenario reports of the links it studies (e.g. DCI fibres), read off the plan it ran."""
    return {f"{e.u}-{e.v}": {"tier": e.tier, "km": e.real.distance_m / 1e3,
                             "real_delay_ms": round(e.real.one_way_delay_s * 1e3, 6),
                             "emulated_delay_ms": round(e.applied.one_way_delay_s * 1e3, 6), "backend": e.backend}
            for e in plan.links if e.tier in tiers}


def plan_json(plan) -> dict:
    """The plan as one JSON-able document."""
    return {
        "name": plan.name, "scale": plan.scale, "mtu": plan.mtu, "frame_bytes": plan.frame_bytes,
        "capabilities": plan.capabilities.to_json(),
        "overrides": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(plan.overrides).items()},
        "notes": list(plan.notes),
        "warnings": list(plan.warnings),
        "pfc": plan.pfc.to_json() if plan.pfc is not None else None,
        "links": [{"u": str(e.u), "v": str(e.v), "tier": e.tier, "ports": {str(e.u): e.port_u, str(e.v): e.port_v},
                   "intf": {str(e.u): e.intf_u, str(e.v): e.intf_v}, "backend": e.backend, "reason": e.reason,
                   "real": _lp(e.real), "emulated": _lp(e.emulated), "applied": _lp(e.applied),
                   "via": e.via, "via_dpid": e.via_dpid, "seed": e.seed,
                   "tc": {str(node): [list(a) for a in argvs] for node, argvs in e.tc}, "notes": list(e.notes)}
                  for e in plan.links],
        "switches": [{"node": str(s.node), "name": s.name, "role": s.role, "kind": s.kind, "dpid": s.dpid,
                      "program": s.program, "datapath": s.datapath, "thrift_port": s.thrift_port,
                      "device_id": s.device_id, "reason": s.reason,
                      "ports": [{"port": p.port, "peer": str(p.peer), "depth_pkts": p.depth_pkts,
                                 "depth_source": p.depth_source, "real_rate_bps": p.real_rate_bps,
                                 "emulated_rate_bps": p.emulated_rate_bps, "emulated_rate_pps": p.emulated_rate_pps,
                                 "ecn": vars(p.ecn) if p.ecn else None} for p in s.ports]}
                     for s in plan.switches],
        "endpoints": [{"node": str(h.node), "name": h.name, "ip": h.ip, "prefixlen": h.prefixlen, "mac": h.mac,
                       "real_line_rate_bps": h.real_line_rate_bps, "emulated_line_rate_bps": h.emulated_line_rate_bps,
                       "real_dcqcn": h.real_dcqcn, "emulated_dcqcn": h.emulated_dcqcn,
                       "real_qp_timeout_s": h.real_qp_timeout_s, "emulated_qp_timeout_s": h.emulated_qp_timeout_s}
                      for h in plan.endpoints],
    }


def _rate(bps) -> str:
    return format_rate(bps) if bps else "-"


def _delay(lp) -> str:
    d = lp.one_way_delay_s
    return format_duration(d) if d else "0"


def print_plan(plan, console) -> None:
    """Links grouped by tier, then switches, on ``console`` (``testbed plan`` passes stdout: it is data)."""
    from rich.table import Table

    console.print(plan.summary_line())
    groups: dict = {}
    for e in plan.links:
        key = (e.tier, e.backend, e.reason, e.real.describe(), e.emulated.describe(), e.applied.describe(),
               e.notes)
        groups.setdefault(key, []).append(e)
    t = Table("tier", "links", "real", "emulated", "backend", "why", title=f"links (scale {plan.scale:g})")
    for (tier, backend, reason, real, emulated, applied, notes), es in groups.items():
        why = reason + ("; " + "; ".join(notes) if notes else "")
        if backend == "userspace" and applied != emulated:
            why += f"; delay line: {applied}"
        t.add_row(str(tier), str(len(es)), real, emulated, backend, why)
    console.print(t)
    sw: dict = {}
    for s in plan.switches:
        ports = sorted({(p.depth_pkts, p.depth_source, p.emulated_rate_pps is not None, bool(p.ecn))
                        for p in s.ports})
        key = (s.role, s.kind, s.program, s.datapath, tuple(ports))
        sw.setdefault(key, []).append(s)
    t = Table("role", "count", "kind", "egress queues", "numbers", title="switches")
    for (role, kind, program, datapath, ports), ss in sw.items():
        queues = ", ".join(f"{d} pkts ({src})" + (" BMv2 rate" if pps else "") + (" RED" if ecn else "")
                           for d, src, pps, ecn in ports)
        numbers = (f"thrift {ss[0].thrift_port}..{ss[-1].thrift_port}" if kind == "bmv2"
                   else f"dpid {ss[0].dpid}..{ss[-1].dpid}")
        t.add_row(str(role), str(len(ss)), f"{kind} {program or datapath or ''}".strip(), queues, numbers)
    console.print(t)
    if plan.pfc is not None:
        _print_pfc(plan.pfc, console)
    for note in plan.notes:
        console.print(f"[yellow]note: {note}[/yellow]")


def _print_pfc(pfc, console) -> None:
    """Switch ports grouped by headroom: how many, whether xoff + headroom fit the spec's buffer."""
    from rich.table import Table

    from testbed.units import format_size

    cfg = pfc.config
    groups: dict = {}
    for p in pfc.ports:
        groups.setdefault((p.headroom_bytes, p.fits_buffer), []).append(p)
    t = Table("headroom", "switch ports", "xoff + headroom fits buffer", "e.g.",
              title=f"PFC (planned, {'applied' if pfc.applied else 'NOT applied'}): lossless priorities "
                    f"{','.join(map(str, cfg.priorities))}, xoff {format_size(cfg.xoff_bytes)}, "
                    f"xon {format_size(cfg.xon_bytes)}, headroom {'auto' if cfg.headroom_bytes is None else 'fixed'}")
    for (nbytes, fits), ports in sorted(groups.items(), key=lambda kv: kv[0][0]):
        t.add_row(format_size(nbytes), str(len(ports)), {True: "yes", False: "[red]no[/red]"}.get(fits, "- (no buffer:)"),
                  f"{ports[0].switch} port {ports[0].port}")
    console.print(t)
    if pfc.applied:   # where it runs: each link direction's queue, and who its PAUSE reaches
        t = Table("link direction", "role", "xoff", "headroom (physics + emulator)", "PAUSE reaches",
                  title=f"PFC in the link nodes: {len(pfc.links)} links, {len(pfc.relays)} switch ports relay PAUSE")
        for lk in pfc.links:
            for (a, b), side in (((lk.u, lk.v), lk.ab), ((lk.v, lk.u), lk.ba)):
                if side.role != "switch":
                    continue
                t.add_row(f"{a} > {b}", side.role, format_size(side.xoff_bytes),
                          f"{format_size(side.headroom_bytes - side.allowance_bytes)} + "
                          f"{format_size(side.allowance_bytes)}", ", ".join(map(str, side.feeders)))
        console.print(t)
    if pfc.p4:        # BMv2: fabric.p4 accounts per ingress port and pauses that port's peer
        t = Table("ingress port", "xoff", "xon", "headroom (physics + emulator)", "PAUSE refreshed every",
                  title=f"PFC in fabric.p4 (BMv2): {len(pfc.p4)} ingress ports, each PAUSE goes to its peer")
        for p in pfc.p4:
            t.add_row(f"{p.switch} port {p.port} (from {p.peer})", format_size(p.xoff_bytes), format_size(p.xon_bytes),
                      f"{format_size(p.headroom_bytes - p.allowance_bytes)} + {format_size(p.allowance_bytes)}",
                      f"{p.refresh_us / 1e3:g} ms")
        console.print(t)
