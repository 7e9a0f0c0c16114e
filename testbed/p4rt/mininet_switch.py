"""BMv2 as a Mininet switch, for :class:`testbed.emu.replica.Replica`'s ``switch_factory`` hook.

    Replica --switch_factory(node, attrs)--> (Bmv2Switch, {json_path, thrift_port, device_id, ...})
    net.start() --> Bmv2Switch.start(): ports from Mininet's intfs -> Bmv2Process (recorded in node.run)
                                        -> wait until its Thrift port answers (a crash names the log)
    scenario    --> rep.switch(node).client().apply(entries)

The switch runs in the root namespace, as Mininet's other switches; its interfaces (``s1-eth1``) are the
ones Mininet created and Replica recorded.
"""

from __future__ import annotations

from pathlib import Path

from mininet.node import Switch

from testbed.emu.alloc import Allocator
from testbed.errors import EmulationError
from testbed.p4rt.client import SwitchClient
from testbed.p4rt.switch import Bmv2Config, Bmv2Process


class Bmv2Switch(Switch):
    """A Mininet switch running BMv2 ``simple_switch`` (``simple_switch_fast`` unless ``log``).

    Args:
        json_path: compiled P4 program.
        thrift_port, device_id: from the run's :class:`~testbed.emu.alloc.Allocator`.
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


def bmv2_switch_factory(json_path, alloc: Allocator, log_dir=None, pcap_dir=None, log: bool = False,
                        only_p4: bool = True):
    """A ``switch_factory`` for Replica: BMv2 for nodes whose ``p4`` attribute is set (all if not only_p4).

    Each switch gets its Thrift port and device id from ``alloc``.
    """
    def factory(node, attrs):
        if only_p4 and not attrs.get("p4"):
            return None
        return Bmv2Switch, {"json_path": str(json_path), "log_dir": log_dir, "pcap_dir": pcap_dir, "log": log,
                            **alloc.switch(str(node))}
    return factory
