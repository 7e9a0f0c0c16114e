"""The link model: what one emulated link does, in real units, validated once and frozen.

A link is an egress queue feeding a wire::

    frames --> [loss] --> [RED/ECN | tail drop at limit] --> queue --> serialise at rate --> wire (delay +- jitter) -->

:class:`LinkParams` carries the real-world figures (a 400G port, 30 km of fibre, a 10 MB buffer,
DCQCN's Kmin/Kmax/Pmax); :meth:`LinkParams.scaled` maps them onto the emulated link through the
replica's :class:`~testbed.dilation.Dilation` (rate / scale, delay and jitter * scale; buffers, RED
thresholds and loss unchanged, so BDP in packets and the marking curve are preserved).

Everything here is pure: the spec loader calls :meth:`LinkParams.from_spec` on a ``link:`` block, the
backends (:mod:`testbed.links.tc`, :mod:`testbed.links.delayline`) consume the scaled result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from testbed.dilation import Dilation
from testbed.errors import SpecError
from testbed.units import (
    FIBRE_DELAY_S_PER_M,
    format_duration,
    format_rate,
    format_size,
    parse_distance,
    parse_duration,
    parse_rate,
    parse_size,
)

#: Queue limit when a link gives none: the kernel's default txqueuelen (and netem's default limit).
DEFAULT_LIMIT_PACKETS = 1000

PACKETS = "packets"
BYTES = "bytes"


def _probability(value, field: str) -> float:
    """A probability given as a fraction (0.01) or a percentage string ("1%")."""
    if isinstance(value, bool):
        raise SpecError(field, f"expected a probability such as 0.01 or '1%', got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise SpecError(field, f"expected a probability such as 0.01 or '1%', got {value!r}") from None
    elif isinstance(value, (int, float)):
        number = float(value)
    else:
        raise SpecError(field, f"expected a probability such as 0.01 or '1%', got {type(value).__name__}")
    if not 0.0 <= number <= 1.0 or math.isnan(number):
        raise SpecError(field, f"must be between 0 and 1 (0% and 100%), got {value!r}")
    return number


def _check_keys(block: dict, allowed: tuple, field: str) -> None:
    if not isinstance(block, dict):
        raise SpecError(field, f"expected a mapping with keys {', '.join(allowed)}, got {type(block).__name__}")
    unknown = sorted(set(block) - set(allowed))
    if unknown:
        raise SpecError(f"{field}.{unknown[0]}", f"unknown key; allowed: {', '.join(allowed)}")


def _queue_amount(value, field: str) -> tuple[float, str]:
    """``100KB`` -> (100000, bytes); ``64p``/``64pkts``/``64packets`` or a bare int -> (64, packets)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise SpecError(field, f"must be positive, got {value!r}")
        return float(value), PACKETS
    if isinstance(value, str):
        text = value.strip().lower()
        for suffix in ("packets", "pkts", "p"):
            if text.endswith(suffix) and text[: -len(suffix)].strip().isdigit():
                n = int(text[: -len(suffix)])
                if n <= 0:
                    raise SpecError(field, f"must be positive, got {value!r}")
                return float(n), PACKETS
    size = parse_size(value, field)
    if size <= 0:
        raise SpecError(field, f"must be positive, got {value!r}")
    return size, BYTES


@dataclass(frozen=True)
class RedParams:
    """RED/ECN marking on the instantaneous egress queue, DCQCN style.

    Probability 0 below ``kmin``, linear to ``pmax`` at ``kmax``, 1 above ``kmax``. With ``ecn`` the
    ECN-capable (ECT) packets are marked CE instead of dropped; non-ECT packets are dropped with the same
    probability (RFC 3168 section 7).

    Attributes:
        kmin, kmax: thresholds in ``unit`` (bytes or packets).
        pmax: probability at ``kmax`` (0..1).
        unit: ``bytes`` or ``packets``.
        ecn: mark ECT packets instead of dropping them.
    """

    kmin: float
    kmax: float
    pmax: float
    unit: str = BYTES
    ecn: bool = True

    def __post_init__(self):
        if self.unit not in (BYTES, PACKETS):
            raise SpecError("red.unit", f"must be bytes or packets, got {self.unit!r}")
        if not (self.kmin >= 0 and self.kmax >= 0):
            raise SpecError("red.kmin", f"thresholds must not be negative (kmin={self.kmin}, kmax={self.kmax})")
        if self.kmin > self.kmax:
            raise SpecError("red.kmin", f"must not exceed kmax ({self.kmin:g} > {self.kmax:g} {self.unit})")
        if not 0.0 <= self.pmax <= 1.0:
            raise SpecError("red.pmax", f"must be between 0 and 1, got {self.pmax!r}")

    def probability(self, depth: float) -> float:
        """Marking (or early-drop) probability at queue ``depth`` (same unit as the thresholds)."""
        return mark_probability(depth, self.kmin, self.kmax, self.pmax)

    @classmethod
    def from_spec(cls, block: dict, field: str = "red") -> "RedParams":
        """``{kmin: 100KB, kmax: 400KB, pmax: 20%, ecn: true}``; thresholds in bytes or packets (``20p``)."""
        _check_keys(block, ("kmin", "kmax", "pmax", "ecn"), field)
        for key in ("kmin", "kmax", "pmax"):
            if key not in block:
                raise SpecError(f"{field}.{key}", "is required (kmin, kmax, pmax)")
        kmin, unit_min = _queue_amount(block["kmin"], f"{field}.kmin")
        kmax, unit_max = _queue_amount(block["kmax"], f"{field}.kmax")
        if unit_min != unit_max:
            raise SpecError(f"{field}.kmax", f"must use the same unit as kmin ({unit_min}), got {unit_max}")
        ecn = block.get("ecn", True)
        if not isinstance(ecn, bool):
            raise SpecError(f"{field}.ecn", f"expected true or false, got {ecn!r}")
        if kmin > kmax:
            raise SpecError(f"{field}.kmin", f"must not exceed kmax ({block['kmin']} > {block['kmax']})")
        pmax = _probability(block["pmax"], f"{field}.pmax")
        return cls(kmin=kmin, kmax=kmax, pmax=pmax, unit=unit_min, ecn=ecn)


def mark_probability(depth: float, kmin: float, kmax: float, pmax: float) -> float:
    """DCQCN/RED marking curve on the instantaneous queue.

    0 below ``kmin``; ``pmax * (depth - kmin) / (kmax - kmin)`` between; 1 above ``kmax``. At exactly
    ``kmax`` the value is ``pmax`` (the curve's right end), above it every packet is marked.
    """
    if depth < kmin:
        return 0.0
    if depth > kmax:
        return 1.0
    if kmax == kmin:
        return pmax
    return pmax * (depth - kmin) / (kmax - kmin)


@dataclass(frozen=True)
class LossModel:
    """Random (Bernoulli) or Gilbert-Elliott burst loss.

    Gilbert-Elliott: a good and a bad state; ``p`` is the per-packet probability of going good -> bad,
    ``r`` bad -> good; ``loss_bad``/``loss_good`` are the loss probabilities inside each state. The mean
    loss is ``(r * loss_good + p * loss_bad) / (p + r)`` and the mean burst length ``1 / r`` packets.

    Attributes:
        kind: ``random`` or ``gilbert-elliott``.
        rate: loss probability for ``random``.
    """

    kind: str = "random"
    rate: float = 0.0
    p: float = 0.0
    r: float = 1.0
    loss_bad: float = 1.0
    loss_good: float = 0.0

    def __post_init__(self):
        if self.kind not in ("random", "gilbert-elliott"):
            raise SpecError("loss.model", f"must be random or gilbert-elliott, got {self.kind!r}")
        for name in ("rate", "p", "r", "loss_bad", "loss_good"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise SpecError(f"loss.{name}", f"must be between 0 and 1, got {value!r}")
        if self.kind == "gilbert-elliott" and self.p + self.r == 0:
            raise SpecError("loss.r", "p and r cannot both be 0")

    @property
    def mean(self) -> float:
        """Long-run loss probability."""
        if self.kind == "random":
            return self.rate
        return (self.r * self.loss_good + self.p * self.loss_bad) / (self.p + self.r)

    @property
    def active(self) -> bool:
        return self.mean > 0

    @classmethod
    def from_spec(cls, value, field: str = "loss") -> "LossModel":
        """``1%`` / ``0.01`` (random), or ``{model: gilbert-elliott, p: 1%, r: 25%, loss_bad: 1, loss_good: 0}``."""
        if not isinstance(value, dict):
            return cls(kind="random", rate=_probability(value, field))
        _check_keys(value, ("model", "rate", "p", "r", "loss_bad", "loss_good"), field)
        kind = value.get("model", "random")
        if kind == "random":
            if "rate" not in value:
                raise SpecError(f"{field}.rate", "is required for random loss")
            extra = sorted(set(value) - {"model", "rate"})
            if extra:
                raise SpecError(f"{field}.{extra[0]}", "only applies to model: gilbert-elliott")
            return cls(kind="random", rate=_probability(value["rate"], f"{field}.rate"))
        if kind != "gilbert-elliott":
            raise SpecError(f"{field}.model", f"must be random or gilbert-elliott, got {kind!r}")
        if "rate" in value:
            raise SpecError(f"{field}.rate", "only applies to model: random (use p, r, loss_bad, loss_good)")
        for key in ("p", "r"):
            if key not in value:
                raise SpecError(f"{field}.{key}", "is required for gilbert-elliott loss")
        probs = {k: _probability(value[k], f"{field}.{k}") for k in ("p", "r", "loss_bad", "loss_good")
                 if k in value}
        if probs["p"] + probs["r"] == 0:
            raise SpecError(f"{field}.r", "p and r cannot both be 0")
        return cls(kind="gilbert-elliott", **probs)


@dataclass(frozen=True)
class LinkParams:
    """One link's emulation parameters (one direction's egress; applied to both directions).

    ``None`` means "not set": the edge's own ``rate_bps``/``delay_s`` fill it (:meth:`with_defaults`).

    Attributes:
        rate_bps: line rate, bits/s (None: unlimited).
        delay_s: one-way propagation delay, seconds.
        jitter_s: delay variation (uniform +- jitter; frames are never reordered).
        distance_m: fibre length; gives ``delay_s`` at 5 us/km when no delay is set.
        loss: random or burst loss.
        limit: queue limit, in ``limit_unit`` (None: 1000 packets).
        limit_unit: ``packets`` or ``bytes``.
        red: RED/ECN marking.
    """

    rate_bps: float | None = None
    delay_s: float | None = None
    jitter_s: float = 0.0
    distance_m: float = 0.0
    loss: LossModel | None = None
    limit: float | None = None
    limit_unit: str = PACKETS
    red: RedParams | None = None

    def __post_init__(self):
        if self.rate_bps is not None and not self.rate_bps > 0:
            raise SpecError("link.rate", f"must be positive, got {self.rate_bps!r}")
        if self.delay_s is not None and not self.delay_s >= 0:
            raise SpecError("link.delay", f"must not be negative, got {self.delay_s!r}")
        if not self.jitter_s >= 0:
            raise SpecError("link.jitter", f"must not be negative, got {self.jitter_s!r}")
        if not self.distance_m >= 0:
            raise SpecError("link.distance", f"must not be negative, got {self.distance_m!r}")
        if self.limit_unit not in (PACKETS, BYTES):
            raise SpecError("link.queue", f"unit must be packets or bytes, got {self.limit_unit!r}")
        if self.limit is not None and not self.limit > 0:
            raise SpecError("link.queue", f"must be positive, got {self.limit!r}")
        if self.limit_unit == BYTES and self.limit is not None and self.limit < 1514:
            raise SpecError("link.queue", f"a byte limit must hold one full frame (>= 1514 B), got {self.limit:g}")

    # -- derived -----------------------------------------------------------------------------------
    @property
    def one_way_delay_s(self) -> float:
        """Delay, from ``delay_s`` or else from ``distance_m`` at 5 us/km."""
        if self.delay_s is not None:
            return self.delay_s
        return self.distance_m * FIBRE_DELAY_S_PER_M

    @property
    def queue_limit(self) -> tuple[float, str]:
        """(limit, unit) with the default applied."""
        if self.limit is None:
            return float(DEFAULT_LIMIT_PACKETS), PACKETS
        return self.limit, self.limit_unit

    @property
    def needs_delay_line(self) -> bool:
        """True when a plain rate shaper (tc HTB) cannot do it: delay, jitter, loss or RED."""
        return (self.one_way_delay_s > 0 or self.jitter_s > 0 or self.red is not None
                or (self.loss is not None and self.loss.active))

    def with_defaults(self, rate_bps: float | None = None, delay_s: float | None = None,
                      distance_m: float | None = None) -> "LinkParams":
        """Fill unset rate/delay/distance from the edge's attributes (the ``link:`` block wins)."""
        changes = {}
        if self.rate_bps is None and rate_bps:
            changes["rate_bps"] = float(rate_bps)
        if self.delay_s is None and not self.distance_m:
            if delay_s:
                changes["delay_s"] = float(delay_s)
            elif distance_m:
                changes["distance_m"] = float(distance_m)
        return replace(self, **changes) if changes else self

    def scaled(self, dilation: Dilation | float) -> "LinkParams":
        """The emulated link: rate / scale, delay and jitter * scale; queue, RED and loss unchanged.

        The result has ``delay_s`` set explicitly (distance already converted).
        """
        d = dilation if isinstance(dilation, Dilation) else Dilation(float(dilation))
        return replace(self,
                       rate_bps=d.rate(self.rate_bps) if self.rate_bps is not None else None,
                       delay_s=d.time(self.one_way_delay_s),
                       jitter_s=d.time(self.jitter_s),
                       distance_m=0.0)

    def describe(self) -> str:
        """One human line, e.g. ``100 Mbit/s, 50 ms +- 1 ms, loss 1%, queue 1000 packets, RED 20-80p``."""
        parts = [format_rate(self.rate_bps) if self.rate_bps else "unlimited rate"]
        delay = self.one_way_delay_s
        if delay or self.jitter_s:
            parts.append(format_duration(delay) + (f" +- {format_duration(self.jitter_s)}" if self.jitter_s else ""))
        if self.loss is not None and self.loss.active:
            parts.append(f"loss {self.loss.mean:.3%}" + (" (burst)" if self.loss.kind != "random" else ""))
        limit, unit = self.queue_limit
        parts.append(f"queue {format_size(limit)}" if unit == BYTES else f"queue {limit:g} packets")
        if self.red is not None:
            r = self.red
            span = (f"{format_size(r.kmin)}-{format_size(r.kmax)}" if r.unit == BYTES
                    else f"{r.kmin:g}-{r.kmax:g} packets")
            parts.append(f"RED {span} pmax {r.pmax:g}" + (" ECN" if r.ecn else " drop"))
        return ", ".join(parts)

    def to_dict(self) -> dict:
        """Plain JSON-able dict (SI units); :meth:`from_dict` reverses it (the delay line's argv)."""
        doc = {"rate_bps": self.rate_bps, "delay_s": self.one_way_delay_s, "jitter_s": self.jitter_s,
               "limit": self.limit, "limit_unit": self.limit_unit}
        if self.loss is not None:
            doc["loss"] = vars(self.loss).copy()
        if self.red is not None:
            doc["red"] = vars(self.red).copy()
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> "LinkParams":
        loss = LossModel(**doc["loss"]) if doc.get("loss") else None
        red = RedParams(**doc["red"]) if doc.get("red") else None
        return cls(rate_bps=doc.get("rate_bps"), delay_s=doc.get("delay_s"), jitter_s=doc.get("jitter_s", 0.0),
                   limit=doc.get("limit"), limit_unit=doc.get("limit_unit", PACKETS), loss=loss, red=red)

    @classmethod
    def from_spec(cls, block: dict | None, field: str = "link") -> "LinkParams":
        """Validate a spec ``link:`` block.

        Keys: ``rate`` (``100G``), ``delay`` (``50ms``) or ``distance`` (``30km``), ``jitter``,
        ``loss`` (``1%`` or a Gilbert-Elliott mapping), ``queue`` (``1000`` packets, ``64p`` or ``10MB``),
        ``red`` (``{kmin, kmax, pmax, ecn}``).

        Raises:
            SpecError: naming the offending field, e.g. ``links.dci.link.red.kmin``.
        """
        if block is None:
            return cls()
        keys = ("rate", "delay", "distance", "jitter", "loss", "queue", "red")
        _check_keys(block, keys, field)
        if "delay" in block and "distance" in block:
            raise SpecError(f"{field}.delay", "give delay or distance, not both (distance gives 5 us/km)")
        kwargs: dict = {}
        if "rate" in block:
            kwargs["rate_bps"] = parse_rate(block["rate"], f"{field}.rate")
            if kwargs["rate_bps"] <= 0:
                raise SpecError(f"{field}.rate", f"must be positive, got {block['rate']!r}")
        if "delay" in block:
            kwargs["delay_s"] = parse_duration(block["delay"], f"{field}.delay")
        if "distance" in block:
            kwargs["distance_m"] = parse_distance(block["distance"], f"{field}.distance")
        if "jitter" in block:
            kwargs["jitter_s"] = parse_duration(block["jitter"], f"{field}.jitter")
        if "loss" in block:
            kwargs["loss"] = LossModel.from_spec(block["loss"], f"{field}.loss")
        if "queue" in block:
            limit, unit = _queue_amount(block["queue"], f"{field}.queue")
            if unit == BYTES and limit < 1514:
                raise SpecError(f"{field}.queue", f"a byte limit must hold one full frame (>= 1514 B), "
                                                  f"got {block['queue']!r}")
            kwargs["limit"], kwargs["limit_unit"] = limit, unit
        if "red" in block:
            kwargs["red"] = RedParams.from_spec(block["red"], f"{field}.red")
        return cls(**kwargs)
