"""BMv2 as a Mininet switch, for :class:`testbed.emu.replica.Replica`'s ``switch_factory`` hook.

    Replica --switch_factory(plan entry)--> (Bmv2Switch, {json_path, thrift_port, device_id, ...})
    net.start() --> Bmv2Switch.start(): ports from Mininet's intfs -> Bmv2Process (recorded in node.run)
                                        -> wait until its Thrift port answers (a crash names the log)
    scenario    --> rep.switch(node).client().apply(entries)

The switch runs in the root namespace, as Mininet's other switches; its interfaces (``s1-eth1``) are the
ones Mininet created and Replica recorded.
"""

from __future__ import annotations

from pathlib import Path

from mininet.node import Switch

from testbed.emu import ops
from testbed.errors import EmulationError
from testbed.p4rt.client import SwitchClient
from testbed.p4rt.switch import Bmv2Config, Bmv2Process


class Bmv2Switch(Switch):
    """A Mininet switch running BMv2 ``simple_switch`` (``simple_switch_fast`` unless ``log``).

    Args:
        json_path: compiled P4 program.
        thrift_port, device_id: from the plan (its one :class:`~testbed.plan.alloc.Allocator`).
        log_dir: where ``<name>.log`` goes.
        pcap_dir: per-port pcaps when set.
        log: per-packet log (slow).
    """

    def __init__(self, name, json_path=None, thrift_port=None, device_id=None, log_dir=None, pcap_dir=None,
                 log=False, **params):
        super().__init__(name, **params)
        if json_path is None or thrift_port is None or device_id is None:
            raise EmulationError(f"switch {name}: Bmv2Switch needs json_path, thrift_port and device_id")
        self.json_path = Path(json_path)
        self.thrift_port = int(thrift_port)
        self.device_id = int(device_id)
        self.log_dir = Path(log_dir) if log_dir else Path("/tmp") / f"testbed-bmv2-{thrift_port}"
        self.pcap_dir = Path(pcap_dir) if pcap_dir else None
        self.log = log
        self.process: Bmv2Process | None = None

    def config(self) -> Bmv2Config:
        ports = {port: intf.name for port, intf in self.intfs.items() if intf.name != "lo"}
        return Bmv2Config(name=self.name, json_path=self.json_path, ports=ports, thrift_port=self.thrift_port,
                          device_id=self.device_id, log_dir=self.log_dir, log=self.log, pcap_dir=self.pcap_dir)

    def start(self, controllers) -> None:
        run = getattr(self, "run", None)
        if run is None:
            raise EmulationError(f"switch {self.name}: no run registry (create it through Replica)")
        for intf in self.config().ports.values():
            # the root namespace's IPv6 stack would send neighbour discovery and MLD out of the switch's
            # ports: frames no switch forwarded, which blur the frame balance of testbed.links.hops
            knob = Path("/proc/sys/net/ipv6/conf") / intf / "disable_ipv6"
            if knob.exists():
                knob.write_text("1\n")
            # with TSO/GSO on (a veth's default) libpcap sizes each ring slot for a 64 KiB super-frame:
            # the 16 MiB receive ring (testbed/p4rt/rx.py) then held 256 frames, not 10486, and a switch
            # descheduled for ~0.1 s lost frames there (the long haul's "capture ring" losses, measured
            # with gdb on PACKET_RX_RING). Frames on these wires are never larger than the MTU.
            ops.run(ops.offload_off_argv(intf), what=f"disable offloads on {intf}", check=False)
        self.process = Bmv2Process(self.config()).start(run)
        self.process.wait_ready()

    def stop(self, deleteIntfs=True) -> None:  # noqa: N803 - Mininet's signature
        if self.process is not None:
            self.process.stop()
        super().stop(deleteIntfs)

    def client(self) -> SwitchClient:
        if self.process is None:
            raise EmulationError(f"switch {self.name} is not running")
        return self.process.client()

    def connected(self) -> bool:
        return self.process is not None and self.process.proc is not None and self.process.proc.poll() is None


def bmv2_switch_factory(programs, log_dir=None, pcap_dir=None, log: bool = False):
    """A ``switch_factory`` for Replica: the plan's BMv2 switches, with their Thrift port and device id.

    Args:
        programs: ``{program name: compiled JSON path}`` (``compile_p4``), or one path for every switch.
    """
    def factory(entry):
        path = programs.get(entry.program) if isinstance(programs, dict) else programs
        if path is None:
            raise EmulationError(f"switch {entry.node}: no compiled JSON for P4 program {entry.program!r}")
        return Bmv2Switch, {"json_path": str(path), "log_dir": log_dir, "pcap_dir": pcap_dir, "log": log,
                            "thrift_port": entry.thrift_port, "device_id": entry.device_id}
    return factory


def plan_switch_factory(plan, log_dir=None, pcap_dir=None, log: bool = False):
    """:func:`bmv2_switch_factory` for every P4 program the plan's BMv2 switches run (compiled, cached)."""
    from testbed.p4rt.compile import REPO_ROOT, compile_p4

    programs = {s.program for s in plan.switches if s.kind == "bmv2"}
    return bmv2_switch_factory({p: compile_p4(REPO_ROOT / "p4" / f"{p}.p4") for p in sorted(programs)},
                               log_dir=log_dir, pcap_dir=pcap_dir, log=log)
