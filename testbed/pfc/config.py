"""The spec's ``pfc:`` block: which priorities are lossless, thresholds, headroom, DSCP map, watchdog.

    pfc:
      priorities: [3]          # lossless priorities (0..7); RoCE's default
      xoff: 100KB              # ingress bytes of one priority at which PAUSE is sent upstream
      xon: 97KB                # ... and below which XON (pause time 0) follows; default xoff - 2 frames
      headroom: auto           # or bytes; auto = testbed.pfc.headroom per port (cable, rate, MTU)
      quanta: 65535            # pause time sent with XOFF, in 512-bit times of the real line rate
      dscp: {26: 3, 48: 6}     # overrides of the default DSCP -> priority map (DSCP >> 3)
      watchdog: {detect: 200ms, restore: 200ms, action: drop}

Validated once, frozen; every error is a :class:`~testbed.errors.SpecError` naming the dotted field, as
:class:`~testbed.links.model.LinkParams` does for ``link:`` blocks. The default DSCP map is the one NVIDIA
NICs use in "trust dscp" mode (priority = DSCP >> 3): RoCE data on DSCP 26 lands on priority 3, CNPs on
DSCP 48 on priority 6.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.errors import SpecError
from testbed.units import parse_duration, parse_size

#: IEEE 802.1Q priorities (traffic classes of a PFC frame's class-enable vector).
PRIORITIES = 8

#: DSCP values and priorities NVIDIA's RoCE defaults use.
ROCE_DSCP, ROCE_PRIORITY = 26, 3
CNP_DSCP, CNP_PRIORITY = 48, 6

#: Largest pause time a PFC frame carries (16 bits).
MAX_QUANTA = 0xFFFF

#: Bytes a maximum frame occupies on the wire beyond the MTU: Ethernet header 14 + FCS 4 + preamble/SFD 8
#: + inter-frame gap 12 (no VLAN tag: priorities come from DSCP).
FRAME_OVERHEAD = 38

DEFAULT_XOFF_BYTES = 100e3

#: A host's NIC side of a link node (the incast fixture's senders, a replica's host links): host memory holds
#: what a pause keeps back, so its queue is large and its own xoff (PAUSE into the host) never reached.
NIC_LIMIT_BYTES = 50e6
NIC_XOFF_BYTES = 40e6
NIC_XON_BYTES = NIC_XOFF_BYTES / 2
NIC_HEADROOM_BYTES = NIC_LIMIT_BYTES - NIC_XOFF_BYTES

WATCHDOG_ACTIONS = ("drop", "ignore")

KEYS = ("priorities", "xoff", "xon", "headroom", "quanta", "dscp", "watchdog")
WATCHDOG_KEYS = ("detect", "restore", "action")


def default_dscp_map() -> tuple[int, ...]:
    """Priority of each DSCP 0..63 as NVIDIA's "trust dscp" default: DSCP >> 3 (26 -> 3, 48 -> 6)."""
    return tuple(d >> 3 for d in range(64))


@dataclass(frozen=True)
class WatchdogParams:
    """PFC watchdog (storm detection) of every lossless queue, in real units (dilated by the replica).

    Attributes:
        detect_s: a queue paused continuously this long while it holds frames is declared in storm.
        restore_s: the storm ends after this long without a PAUSE (non-zero pause time) for that queue.
        action: ``drop`` (discard the queue's frames during the storm) or ``ignore`` (send despite PAUSE).
    """

    detect_s: float = 0.2
    restore_s: float = 0.2
    action: str = "drop"

    def __post_init__(self):
        if not self.detect_s > 0:
            raise SpecError("pfc.watchdog.detect", f"must be positive, got {self.detect_s!r}")
        if not self.restore_s > 0:
            raise SpecError("pfc.watchdog.restore", f"must be positive, got {self.restore_s!r}")
        if self.action not in WATCHDOG_ACTIONS:
            raise SpecError("pfc.watchdog.action", f"must be one of {', '.join(WATCHDOG_ACTIONS)}, "
                                                   f"got {self.action!r}")

    @classmethod
    def from_spec(cls, block, field: str = "pfc.watchdog") -> "WatchdogParams":
        """``{detect: 200ms, restore: 200ms, action: drop}`` (SONiC's pfcwd defaults when left out)."""
        _check_keys(block, WATCHDOG_KEYS, field)
        kwargs = {}
        for key in ("detect", "restore"):
            if key in block:
                seconds = parse_duration(block[key], f"{field}.{key}")
                if seconds <= 0:
                    raise SpecError(f"{field}.{key}", f"must be positive, got {block[key]!r}")
                kwargs[f"{key}_s"] = seconds
        if "action" in block:
            if block["action"] not in WATCHDOG_ACTIONS:
                raise SpecError(f"{field}.action", f"must be one of {', '.join(WATCHDOG_ACTIONS)}, "
                                                   f"got {block['action']!r}")
            kwargs["action"] = block["action"]
        return cls(**kwargs)


@dataclass(frozen=True)
class PfcConfig:
    """PFC of a fabric (every port), validated and frozen.

    Attributes:
        priorities: lossless priorities, sorted.
        xoff_bytes: ingress occupancy of one priority at which PAUSE goes upstream.
        xon_bytes: occupancy at or below which XON follows (< xoff).
        headroom_bytes: bytes above xoff absorbed before dropping; None = computed per port ("auto").
        quanta: pause time sent with XOFF, in quanta of 512 bit times at the real line rate.
        dscp_map: priority of each DSCP 0..63.
        watchdog: storm detection, or None.
    """

    priorities: tuple[int, ...] = (ROCE_PRIORITY,)
    xoff_bytes: float = DEFAULT_XOFF_BYTES
    xon_bytes: float = DEFAULT_XOFF_BYTES - 2 * (1500 + FRAME_OVERHEAD)
    headroom_bytes: float | None = None
    quanta: int = MAX_QUANTA
    dscp_map: tuple[int, ...] = default_dscp_map()
    watchdog: WatchdogParams | None = None

    def __post_init__(self):
        if not self.priorities or any(not 0 <= p < PRIORITIES for p in self.priorities):
            raise SpecError("pfc.priorities", f"expected priorities 0..7, got {list(self.priorities)!r}")
        if not 0 <= self.xon_bytes < self.xoff_bytes:
            raise SpecError("pfc.xon", f"must be below xoff ({self.xon_bytes:g} >= {self.xoff_bytes:g} B)")
        if self.headroom_bytes is not None and not self.headroom_bytes > 0:
            raise SpecError("pfc.headroom", f"must be positive, got {self.headroom_bytes!r}")
        if not 1 <= self.quanta <= MAX_QUANTA:
            raise SpecError("pfc.quanta", f"must be 1..{MAX_QUANTA}, got {self.quanta!r}")
        if len(self.dscp_map) != 64 or any(not 0 <= p < PRIORITIES for p in self.dscp_map):
            raise SpecError("pfc.dscp", "needs a priority 0..7 for each of the 64 DSCP values")

    def lossless(self, priority: int) -> bool:
        return priority in self.priorities

    def priority_of(self, dscp: int) -> int:
        """Priority of a DSCP value (0..63)."""
        return self.dscp_map[dscp]

    def to_dict(self) -> dict:
        """JSON-able form (SI units) for plan.json and the link node's argv."""
        return {"priorities": list(self.priorities), "xoff_bytes": self.xoff_bytes, "xon_bytes": self.xon_bytes,
                "headroom_bytes": self.headroom_bytes, "quanta": self.quanta,
                "dscp": {d: p for d, p in enumerate(self.dscp_map) if p != d >> 3},
                "watchdog": vars(self.watchdog).copy() if self.watchdog else None}

    @classmethod
    def from_dict(cls, doc: dict) -> "PfcConfig":
        """Reverse of :meth:`to_dict` (the link node's argv)."""
        table = list(default_dscp_map())
        for dscp, prio in (doc.get("dscp") or {}).items():
            table[int(dscp)] = int(prio)
        wd = doc.get("watchdog")
        return cls(priorities=tuple(doc["priorities"]), xoff_bytes=float(doc["xoff_bytes"]),
                   xon_bytes=float(doc["xon_bytes"]), headroom_bytes=doc.get("headroom_bytes"),
                   quanta=int(doc.get("quanta", MAX_QUANTA)), dscp_map=tuple(table),
                   watchdog=WatchdogParams(**wd) if wd else None)

    @classmethod
    def from_spec(cls, block, field: str = "pfc", mtu: int = 1500,
                  buffer_bytes: float | None = None) -> "PfcConfig":
        """Validate a spec ``pfc:`` block.

        Args:
            block: the mapping from YAML.
            field: dotted name for errors.
            mtu: the fabric's MTU (the default xon is xoff minus two maximum frames).
            buffer_bytes: the per-port buffer, if the spec sets one: xoff + a fixed headroom must fit.

        Raises:
            SpecError: naming the offending field, e.g. ``pfc.xon``.
        """
        _check_keys(block, KEYS, field)
        kwargs: dict = {}
        if "priorities" in block:
            kwargs["priorities"] = _priorities(block["priorities"], f"{field}.priorities")
        xoff = DEFAULT_XOFF_BYTES
        if "xoff" in block:
            xoff = parse_size(block["xoff"], f"{field}.xoff")
            if xoff < mtu + FRAME_OVERHEAD:
                raise SpecError(f"{field}.xoff", f"must hold one maximum frame ({mtu + FRAME_OVERHEAD} B), "
                                                 f"got {block['xoff']!r}")
        kwargs["xoff_bytes"] = xoff
        if "xon" in block:
            xon = parse_size(block["xon"], f"{field}.xon")
            if xon >= xoff:
                raise SpecError(f"{field}.xon", f"must be below xoff ({block['xon']!r} >= {xoff:g} B)")
        else:
            xon = max(0.0, xoff - 2 * (mtu + FRAME_OVERHEAD))
        kwargs["xon_bytes"] = xon
        headroom = block.get("headroom", "auto")
        if headroom != "auto":
            size = parse_size(headroom, f"{field}.headroom")
            if size < mtu + FRAME_OVERHEAD:
                raise SpecError(f"{field}.headroom", f"must hold one maximum frame ({mtu + FRAME_OVERHEAD} B) "
                                                     f"or be 'auto', got {headroom!r}")
            kwargs["headroom_bytes"] = size
            if buffer_bytes is not None and xoff + size > buffer_bytes:
                raise SpecError(f"{field}.headroom", f"xoff + headroom ({xoff + size:g} B) exceed the port "
                                                     f"buffer ({buffer_bytes:g} B)")
        if "quanta" in block:
            q = block["quanta"]
            if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= MAX_QUANTA:
                raise SpecError(f"{field}.quanta", f"expected an integer 1..{MAX_QUANTA}, got {q!r}")
            kwargs["quanta"] = q
        if "dscp" in block:
            kwargs["dscp_map"] = _dscp_map(block["dscp"], f"{field}.dscp")
        if block.get("watchdog") is not None:
            kwargs["watchdog"] = WatchdogParams.from_spec(block["watchdog"], f"{field}.watchdog")
        return cls(**kwargs)


def _check_keys(block, allowed: tuple, field: str) -> None:
    if not isinstance(block, dict):
        raise SpecError(field, f"expected a mapping with keys {', '.join(allowed)}, got {type(block).__name__}")
    unknown = sorted(set(block) - set(allowed), key=str)
    if unknown:
        raise SpecError(f"{field}.{unknown[0]}", f"unknown key; allowed: {', '.join(allowed)}")


def _priority(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < PRIORITIES:
        raise SpecError(field, f"expected a priority 0..7, got {value!r}")
    return value


def _priorities(value, field: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise SpecError(field, f"expected a non-empty list of priorities 0..7 such as [3], got {value!r}")
    out = [_priority(v, f"{field}[{i}]") for i, v in enumerate(value)]
    if len(set(out)) != len(out):
        raise SpecError(field, f"lists a priority twice: {value!r}")
    return tuple(sorted(out))


def _dscp_map(value, field: str) -> tuple[int, ...]:
    if not isinstance(value, dict):
        raise SpecError(field, f"expected a mapping DSCP -> priority such as {{26: 3, 48: 6}}, got {value!r}")
    table = list(default_dscp_map())
    for dscp, prio in value.items():
        if isinstance(dscp, bool) or not isinstance(dscp, int) or not 0 <= dscp < 64:
            raise SpecError(f"{field}.{dscp}", "DSCP must be an integer 0..63")
        table[dscp] = _priority(prio, f"{field}.{dscp}")
    return tuple(table)
