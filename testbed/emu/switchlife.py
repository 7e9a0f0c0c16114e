"""Crash an OVS switch of a running replica and bring it back (switch-loss experiments and tests).

A crash is the bridge deleted from ovsdb: its flows, groups and OpenFlow connection vanish at once, while
the veths stay up (the neighbours see carrier, as with a hung switch ASIC), so only the controller's
"datapath disconnected" tells the fabric. A restart re-creates the bridge exactly as the replica built
it (Mininet's own ``OVSSwitch.start``: same ports and OpenFlow numbers, dpid, fail mode, controller) with
empty tables; the controller programs it when it connects::

    crash_switch(rep, "cr0")      # ovs-vsctl del-br cr0
    restart_switch(rep, "cr0")    # the same bridge again, re-noted in the run registry (new ovsdb uuid)

The registry records bridges by name and uuid; the re-created bridge's uuid is noted so that a cleanup
after a crash removes it (a bridge whose uuid differs would be kept as somebody else's).
"""

from __future__ import annotations

from testbed.emu import ops
from testbed.errors import EmulationError


def crash_argv(name: str) -> list[str]:
    return ["ovs-vsctl", "--timeout=10", "del-br", ops.check_ifname(name)]


def crash_switch(rep, name: str) -> None:
    """Delete OVS bridge ``name`` of replica ``rep`` (its tables and controller connection go with it)."""
    if ops.bridge_uuids().get(name) is None:
        raise EmulationError(f"switch {name} is not a running OVS bridge; nothing to crash")
    ops.run(crash_argv(name), what=f"crash switch {name}")


def restart_switch(rep, name: str) -> None:
    """Re-create bridge ``name`` as the replica built it; its controller then programs it on connect."""
    sw = rep.switch(name)
    sw.batch = False  # the replica started it in a batch; one more ovs-vsctl transaction now
    sw.start(rep.net.controllers)
    uuid = ops.bridge_uuids().get(name)
    if uuid is None:
        raise EmulationError(f"switch {name} did not come back (ovs-vsctl add-br failed); see ovs-vswitchd.log")
    for obj in rep.run.objects:
        if obj.get("kind") == "bridge" and obj.get("name") == name:
            rep.run.note(obj, uuid=uuid)
