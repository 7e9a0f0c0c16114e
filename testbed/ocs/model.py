"""An optical circuit switch (OCS), pure: circuits, reconfiguration windows, loss budget, protection.

An OCS joins port pairs with light paths (a liquid-crystal or MEMS cross-connect; the seed's O3S project
built a 64x64 digital-liquid-crystal prototype aimed at fast failure recovery between sites). It never
looks at packets: a circuit carries whatever arrives, in both directions, or nothing::

    set_circuits(now, {1: 2})        ports 1 <-> 2 joined
    set_circuits(now, {1: 3})        1 <-> 3: ports 1, 2, 3 are dark until now + reconfig_s,
                                     then 1 <-> 3 carries light; 2 stays dark (unconnected)

Circuits set through the API or a schedule (``at(now)`` applies every entry due). A circuit is also
dark when its optical loss exceeds the budget (fibre + OCS insertion loss + connectors > budget_db).
Its latency and loss are link parameters (:meth:`CircuitSwitch.circuit_link`), so a replica emulates a
circuit like any other link. Times are real-world seconds; a replica dilates them (x scale).

Protection (1:1, as in DCI line protection): a group (common, working, standby) switches the common
port to standby when the working port loses light for ``detect_s`` (loss-of-light debounce), so the
outage is detect_s + reconfig_s; :func:`packet_reroute_outage_s` is the packet-level comparison
(BFD detection + control-plane reroute).

Defaults are estimates, stated as such in docs/ocs.md: reconfiguration 20 ms (MEMS/LC class; vendors
quote ~10-25 ms for MEMS, tens of ms to seconds for LCoS), insertion loss 1.5 dB, 10 ns latency through
the switch, 0.25 dB/km fibre, 0.5 dB per connector pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from testbed.errors import SpecError
from testbed.links.model import LinkParams, LossModel
from testbed.units import FIBRE_DELAY_S_PER_M

DEFAULT_RECONFIG_S = 20e-3
DEFAULT_DETECT_S = 2e-3
DEFAULT_INSERTION_LOSS_DB = 1.5
DEFAULT_LATENCY_S = 10e-9
FIBRE_DB_PER_KM = 0.25
CONNECTOR_DB = 0.5


@dataclass(frozen=True)
class Reconfiguration:
    """One change of circuits: ``dark`` ports carry nothing from ``start`` to ``end``."""

    start: float
    end: float
    dark: frozenset
    circuits: dict          #: the circuits once the change is done (both directions)


def _pairs(mapping: dict, ports: int, field_name: str = "circuits") -> dict:
    """Both directions of a {a: b} mapping, checked: ports exist, no port twice, no self-circuit."""
    out = {}
    for a, b in mapping.items():
        for p in (a, b):
            if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= ports:
                raise SpecError(field_name, f"port {p!r} is not one of 1..{ports}")
        if a == b:
            raise SpecError(field_name, f"port {a} cannot be joined to itself")
        for p, q in ((a, b), (b, a)):
            if out.get(p, q) != q:
                raise SpecError(field_name, f"port {p} is in two circuits ({out[p]} and {q})")
            out[p] = q
    return out


@dataclass
class CircuitSwitch:
    """An N-port OCS. ``circuits`` (both directions) and the reconfiguration in progress are its state."""

    ports: int
    reconfig_s: float = DEFAULT_RECONFIG_S
    insertion_loss_db: float = DEFAULT_INSERTION_LOSS_DB
    latency_s: float = DEFAULT_LATENCY_S
    circuits: dict = field(default_factory=dict)
    pending: Reconfiguration | None = None
    schedule: list = field(default_factory=list)   #: [(time, {a: b}), ...], applied by at()
    history: list = field(default_factory=list)    #: every Reconfiguration, in order

    def __post_init__(self):
        if isinstance(self.ports, bool) or not isinstance(self.ports, int) or self.ports < 2:
            raise SpecError("ports", f"an OCS needs an integer >= 2 ports, got {self.ports!r}")
        for name in ("reconfig_s", "insertion_loss_db", "latency_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or math.isinf(v):
                raise SpecError(name, f"expected a number >= 0, got {v!r}")
        self.circuits = _pairs(self.circuits, self.ports)

    def set_circuits(self, now: float, mapping: dict) -> Reconfiguration:
        """Replace every circuit by ``mapping`` ({a: b}); ports whose peer changes go dark for
        ``reconfig_s`` (mirrors rotate; light goes nowhere meanwhile). Unchanged circuits keep carrying.

        Raises:
            SpecError: a bad port, a port in two circuits, or a change while one is in progress.
        """
        self.settle(now)
        if self.pending is not None:
            raise SpecError("circuits", f"a reconfiguration is in progress until t = {self.pending.end:g} s")
        new = _pairs(mapping, self.ports)
        changed = frozenset(p for p in set(new) | set(self.circuits) if new.get(p) != self.circuits.get(p))
        rec = Reconfiguration(now, now + (self.reconfig_s if changed else 0.0), changed, new)
        self.history.append(rec)
        if changed:
            self.pending = rec
        else:
            self.circuits = new
        return rec

    def settle(self, now: float) -> None:
        """Finish a reconfiguration whose window has passed."""
        if self.pending is not None and now >= self.pending.end:
            self.circuits, self.pending = dict(self.pending.circuits), None

    def at(self, now: float) -> list[Reconfiguration]:
        """Apply every scheduled change due by ``now`` (in time order); returns those started."""
        self.schedule.sort(key=lambda e: e[0])
        started = []
        while self.schedule and self.schedule[0][0] <= now:
            t, mapping = self.schedule.pop(0)
            self.settle(t)
            started.append(self.set_circuits(max(t, self.pending.end if self.pending else t), mapping))
        self.settle(now)
        return started

    def peer(self, now: float, port: int) -> int | None:
        """Where light entering ``port`` goes at ``now`` (None: dark)."""
        self.settle(now)
        if self.pending is not None and now >= self.pending.start and port in self.pending.dark:
            return None
        return self.circuits.get(port)

    def carries(self, now: float, a: int, b: int) -> bool:
        return self.peer(now, a) == b

    def circuit_link(self, fibre_m: float, rate_bps: float | None = None, budget_db: float = 6.0,
                     connectors: int = 2) -> LinkParams:
        """The link a circuit makes through this switch over ``fibre_m`` of fibre: delay = fibre + switch
        latency; loss probability 1 (dark) when the optical loss exceeds ``budget_db``, else no loss."""
        closes = circuit_loss_db(fibre_m, self.insertion_loss_db, connectors) <= budget_db
        return LinkParams(rate_bps=rate_bps, delay_s=fibre_m * FIBRE_DELAY_S_PER_M + self.latency_s,
                          loss=None if closes else LossModel(rate=1.0))


def circuit_loss_db(fibre_m: float, insertion_loss_db: float = DEFAULT_INSERTION_LOSS_DB, connectors: int = 2,
                    ocs_hops: int = 1) -> float:
    """Optical loss of a circuit: fibre attenuation + OCS insertion loss per hop + connector pairs."""
    return fibre_m / 1e3 * FIBRE_DB_PER_KM + ocs_hops * insertion_loss_db + connectors * CONNECTOR_DB


@dataclass(frozen=True)
class ProtectionGroup:
    """1:1 line protection on one OCS: the common port rides working or standby."""

    common: int
    working: int
    standby: int
    detect_s: float = DEFAULT_DETECT_S

    def on_loss_of_light(self, ocs: CircuitSwitch, now: float, port: int) -> Reconfiguration | None:
        """Called when ``port`` has been dark for ``detect_s``: switch to standby if it is the working
        port and the common port rides it; returns the reconfiguration (None: nothing to do)."""
        if port != self.working or ocs.circuits.get(self.common) != self.working:
            return None
        others = {a: b for a, b in ocs.circuits.items() if a < b and self.common not in (a, b)
                  and self.standby not in (a, b) and self.working not in (a, b)}
        return ocs.set_circuits(now, {**others, self.common: self.standby})


def span_link(fibre_m: float, budget_db: float, through_ocs: bool = True, what: str = "the span",
              field_name: str = "--budget-db", ocs: CircuitSwitch | None = None) -> LinkParams:
    """The link of one fibre span: through an OCS, :meth:`CircuitSwitch.circuit_link` (fibre + the switch's
    latency) refused when it would be dark; plain fibre otherwise (delay from the length only).

    Raises:
        SpecError: the span's optical loss (fibre, insertion loss, connectors) exceeds ``budget_db``,
            named by ``field_name``.
    """
    if not through_ocs:
        return LinkParams(distance_m=fibre_m)
    ocs = ocs or CircuitSwitch(2)
    lp = ocs.circuit_link(fibre_m, budget_db=budget_db)
    if lp.loss is not None:
        raise SpecError(field_name, f"{what} ({fibre_m / 1e3:g} km) loses "
                                    f"{circuit_loss_db(fibre_m, ocs.insertion_loss_db):.1f} dB through the OCS, "
                                    f"more than the {budget_db:g} dB budget: its circuit would be dark; raise "
                                    f"{field_name} or shorten the span")
    return lp


def protection_outage_s(detect_s: float = DEFAULT_DETECT_S, reconfig_s: float = DEFAULT_RECONFIG_S,
                        extra_fibre_m: float = 0.0) -> float:
    """Traffic outage of OCS protection: detection + reconfiguration (+ the standby path's extra
    propagation, which delays the first packet after the switch)."""
    return detect_s + reconfig_s + max(0.0, extra_fibre_m) * FIBRE_DELAY_S_PER_M


def packet_reroute_outage_s(bfd_interval_s: float = 50e-3, bfd_multiplier: int = 3,
                            control_plane_s: float = 0.0) -> float:
    """Packet-level comparison: BFD declares the path down after ``multiplier`` missed intervals, then
    the control plane moves traffic (measured by the scenario, or given)."""
    return bfd_multiplier * bfd_interval_s + control_plane_s


def protection_timings(events: dict, scale: float) -> dict:
    """What a protection switch took, per OCS, from each node's timestamped events (``testbed/ocs/node.py``:
    ``los_seen``, ``los_declared``, ``dark``, ``light``, with ``reason`` protection or schedule).

    Returns real-world milliseconds (emulated wall times / ``scale``) for ``reconfig_window_real_ms`` (dark
    to light), ``detection_real_ms`` (loss seen to declared) and ``revert_window_real_ms`` (the scheduled
    revert's dark to light), and ``emulator_declare_to_dark_ms``, the node's own wall-time overhead from
    declaring to going dark (not dilated: it is the emulator, not the model). ``switched`` counts the OCSs
    that went through a whole protection switch.
    """
    def first(evs, kind, reason=None):
        return next((e["time"] for e in evs if e["kind"] == kind and (reason is None or e.get("reason") == reason)),
                    None)

    out: dict = {"switched": 0, "reconfig_window_real_ms": [], "detection_real_ms": [],
                 "emulator_declare_to_dark_ms": [], "revert_window_real_ms": []}
    for evs in events.values():
        dark, light = first(evs, "dark", "protection"), first(evs, "light", "protection")
        declared, seen = first(evs, "los_declared"), first(evs, "los_seen")
        if None not in (dark, light, declared, seen):
            out["switched"] += 1
            out["reconfig_window_real_ms"].append(round((light - dark) / scale * 1e3, 3))
            out["detection_real_ms"].append(round((declared - seen) / scale * 1e3, 3))
            out["emulator_declare_to_dark_ms"].append(round((dark - declared) * 1e3, 1))
        rdark, rlight = first(evs, "dark", "schedule"), first(evs, "light", "schedule")
        if rdark is not None and rlight is not None:
            out["revert_window_real_ms"].append(round((rlight - rdark) / scale * 1e3, 3))
    return out


# -- render (pure argv for the replica's tc-based OCS node) -----------------------------------------------
def ingress_argv(intf: str) -> list[list[str]]:
    """Make ``intf`` an OCS port: an ingress qdisc for its circuit rule (none yet: dark)."""
    return [["tc", "qdisc", "replace", "dev", intf, "ingress"]]


def light_argv(src: str, dst: str) -> list[str]:
    """Light entering ``src`` leaves through ``dst``: redirect every frame, untouched."""
    return ["tc", "filter", "add", "dev", src, "parent", "ffff:", "protocol", "all", "prio", "1", "u32",
            "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", dst]


def dark_argv(intf: str) -> list[str]:
    """Remove the circuit rule of ``intf``: its frames reach no port (dark)."""
    return ["tc", "filter", "del", "dev", intf, "parent", "ffff:", "protocol", "all", "prio", "1"]
