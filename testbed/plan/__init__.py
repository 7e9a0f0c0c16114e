"""The replica plan (pure): every real -> emulated conversion and every identifier, in one place.

    from testbed.plan import Capabilities, Overrides, plan_replica
    from testbed.doctor import plan_capabilities          # root: probed once, handed down as data

    plan = plan_replica(G, plan_capabilities(), Overrides(link_backend="userspace"))
    plan.links / plan.switches / plan.endpoints             # LinkEntry, SwitchEntry, EndpointEntry
    plan.to_json()                                          # plan.json; `testbed plan SPEC --json`
    with Replica(plan, out_dir=res.dir, ...) as rep: ...    # testbed.emu: executes it

Modules: :mod:`.replica` (the planner), :mod:`.layout` (names, ports, dpids, addresses),
:mod:`.alloc` (Thrift ports, device ids), :mod:`.capabilities`, :mod:`.render` (JSON, tables).
"""

from testbed.plan.capabilities import ASSUMED, Capabilities
from testbed.plan.replica import (
    DELAY_FLOOR_S,
    EcnEntry,
    EndpointEntry,
    LinkEntry,
    Overrides,
    PortEntry,
    ReplicaPlan,
    SwitchEntry,
    edge_link,
    plan_replica,
)

__all__ = ["ASSUMED", "Capabilities", "DELAY_FLOOR_S", "EcnEntry", "EndpointEntry", "LinkEntry", "Overrides",
           "PortEntry", "ReplicaPlan", "SwitchEntry", "edge_link", "plan_replica"]
