"""What the machine can emulate, as data: probed once by ``testbed doctor``, handed to the plan.

The plan (:func:`testbed.plan.plan_replica`) is pure: it never probes. Whoever runs a replica asks
:func:`testbed.doctor.plan_capabilities` (root: it tries netem, RED, the OVS kernel datapath) and passes
the result down; ``testbed plan`` without root and the unit tests pass :data:`ASSUMED` or their own.

    doctor.capabilities() --Capabilities.from_doctor()--> Capabilities --> plan_replica(G, caps)
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Capabilities:
    """The facts a plan depends on.

    Attributes:
        netem: the kernel has ``sch_netem`` (delay/loss in tc).
        red: the kernel has ``sch_red`` with ECN marking.
        ovs_kernel: Open vSwitch's kernel datapath works (else the userspace ``netdev`` one).
        tcp_ports_in_use: ports the Thrift allocator must skip.
        source: ``doctor`` (probed) or ``assumed`` (not probed: the most portable choice).
    """

    netem: bool = False
    red: bool = False
    ovs_kernel: bool = False
    tcp_ports_in_use: frozenset = field(default_factory=frozenset)
    source: str = "assumed"

    @classmethod
    def from_doctor(cls, doc: dict, tcp_ports_in_use=frozenset()) -> "Capabilities":
        """From ``testbed.doctor.capabilities()``'s document (pure)."""
        caps = doc.get("capabilities", {})

        def has(name: str) -> bool:
            return bool(caps.get(name, {}).get("present"))

        return cls(netem=has("netem"), red=has("red"), ovs_kernel=has("ovs_kernel"),
                   tcp_ports_in_use=frozenset(tcp_ports_in_use), source="doctor")

    def to_json(self) -> dict:
        return {"netem": self.netem, "red": self.red, "ovs_kernel": self.ovs_kernel, "source": self.source,
                "tcp_ports_in_use": len(self.tcp_ports_in_use)}


#: Nothing probed: no netem, no RED, OVS userspace datapath (works wherever OVS runs).
ASSUMED = Capabilities()
