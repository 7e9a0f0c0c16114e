"""The fabric.p4 program of every BMv2 switch of a replica plan (pure), and installing one (Thrift glue).

    RoutingBrain(plan.graph).tables() ----+
    plan.pfc.p4 (P4PfcPort per port) -----+--> fabric_program --> {switch: FabricProgram} --install--> switch
    plan.pfc.config (DSCP map, lossless) -+
    plan.pfc.links (feeders: relays) -----+

One place turns a plan into switch programs, so a scenario on a BMv2 fabric gets the routes and the plan's
PFC accounting and relays together (testbed/plan/pfc.py says why BMv2 runs PFC in its program); ``install``
is the one way a program reaches a switch. ECN/fast-CNP config is the scenarios' (``fabric_stats.program_ecn``).
"""

from __future__ import annotations

from testbed.p4rt import entries as E


def pfc_port_config(p) -> E.PfcPortConfig:
    """fabric.p4's ``pfc_config`` of one :class:`testbed.plan.pfc.P4PfcPort` (bytes rounded down: the
    switch never holds more than the plan allows)."""
    return E.PfcPortConfig(xoff_bytes=int(p.xoff_bytes), xon_bytes=int(p.xon_bytes), limit_bytes=int(p.limit_bytes),
                           quanta=int(p.quanta), refresh_us=int(p.refresh_us))


def pfc_relays(plan, sw) -> dict:
    """``{port: [feeder ports]}`` of BMv2 switch entry ``sw``: where fabric.p4 relays a PFC frame from the link
    node behind each port (the plan's feeders, as the tc relay of an OVS switch does; here in the program,
    so the switch knows which of its egresses are held)."""
    port_of = {p.peer: p.port for p in sw.ports}
    out = {}
    for lk in plan.pfc.links:
        for (node, peer), side in (((lk.u, lk.v), lk.ab), ((lk.v, lk.u), lk.ba)):
            if node == sw.node and side.role == "switch" and side.feeders:
                out[port_of[peer]] = [port_of[f] for f in side.feeders]
    return out


def replica_programs(plan, tables: dict) -> dict:
    """``{switch node: FabricProgram}`` of the plan's BMv2 switches: their routes (``tables``: the routing
    brain's ``tables()`` over ``plan.graph``), and where the plan applies PFC, every port's ingress
    accounting and the DSCP map."""
    pfc = plan.pfc if plan.pfc is not None and plan.pfc.applied else None
    out = {}
    for s in plan.switches:
        if s.kind != "bmv2":
            continue
        kw = {}
        if pfc is not None:
            kw = {"pfc_ports": {p.port: pfc_port_config(p) for p in pfc.p4_ports(s.node)},
                  "pfc_dscp": dict(enumerate(pfc.config.dscp_map)), "pfc_lossless": pfc.config.priorities,
                  "pfc_relays": pfc_relays(plan, s)}
        out[s.node] = E.fabric_program(plan.graph, s.node, tables.get(s.node, {}).values(), **kw)
    return out


def install(client, prog: E.FabricProgram) -> None:
    """Program one running switch: its entries, then its clone sessions (fast CNP, PAUSE and XON leave
    through them)."""
    client.apply(prog.entries)
    for session, port in prog.mirrors:
        client.mirroring_add(session, port)
    for group, ports in prog.mc_groups:
        client.mc_group(group, ports)
