"""The fabric.p4 program of every BMv2 switch of a replica plan (pure), and installing one (Thrift glue).

    RoutingBrain(plan.graph).tables() -+
    plan.pfc.p4 (P4PfcPort per port)  -----+--> fabric_program --> {switch: FabricProgram}
    plan.pfc.config (DSCP map, lossless) --+

One place turns a plan into switch programs, so a scenario on a BMv2 fabric gets the routes and the plan's
PFC accounting together (testbed/plan/pfc.py says why BMv2 runs PFC in its program). ECN/fast-CNP config is
the scenarios' (``fabric_stats.program_ecn``).
"""

from __future__ import annotations

from testbed.p4rt import entries as E


def pfc_port_config(p) -> E.PfcPortConfig:
    """fabric.p4's ``pfc_config`` of one :class:`testbed.plan.pfc.P4PfcPort` (bytes rounded down: the
    switch never holds more than the plan allows)."""
    return E.PfcPortConfig(xoff_bytes=int(p.xoff_bytes), xon_bytes=int(p.xon_bytes), limit_bytes=int(p.limit_bytes),
                           quanta=int(p.quanta), refresh_us=int(p.refresh_us))


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
                  "pfc_dscp": dict(enumerate(pfc.config.dscp_map)), "pfc_lossless": pfc.config.priorities}
        out[s.node] = E.fabric_program(plan.graph, s.node, tables.get(s.node, {}).values(), **kw)
    return out


def install(client, prog: E.FabricProgram) -> None:
    """Program one running switch: its entries, then its clone sessions (fast CNP, PAUSE and XON leave
    through them)."""
    client.apply(prog.entries)
    for session, port in prog.mirrors:
        client.mirroring_add(session, port)
