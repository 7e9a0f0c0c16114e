"""Real-world units in specs: ``400G``, ``30km``, ``55us``, ``32MB``.

Every parser takes the field name so that errors say which field was wrong and what is allowed.
Internal units are SI base units: bits/s, bytes, seconds, metres.

    >>> parse_rate("400G", "links.rate")
    400000000000.0
    >>> parse_duration("55us", "dcqcn.alpha_timer")
    5.5e-05
"""

from __future__ import annotations

import math
import re

from testbed.errors import SpecError

#: One-way propagation delay in fibre, seconds per metre (5 us/km).
FIBRE_DELAY_S_PER_M = 5e-9

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

_RATE = {"": 1, "bps": 1, "k": 1e3, "kbps": 1e3, "kbit": 1e3, "m": 1e6, "mbps": 1e6, "mbit": 1e6,
         "g": 1e9, "gbps": 1e9, "gbit": 1e9, "t": 1e12, "tbps": 1e12, "tbit": 1e12}
_SIZE = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3,
         "k": 1e3, "m": 1e6, "g": 1e9}
_TIME = {"": 1, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60}
_DIST = {"": 1, "m": 1, "km": 1e3, "cm": 1e-2}


def _parse(value, field: str, table: dict, what: str, examples: str) -> float:
    if isinstance(value, bool):
        raise SpecError(field, f"expected a {what} such as {examples}, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        m = re.fullmatch(_NUM + r"\s*([a-zA-Zµ]*)", value.strip())
        unit = m.group(2).lower() if m else None
        if not m or unit not in table:
            raise SpecError(field, f"expected a {what} such as {examples}, got {value!r} "
                                   f"(units: {', '.join(u for u in table if u)})")
        number = float(m.group(1)) * table[unit]
    else:
        raise SpecError(field, f"expected a {what} such as {examples}, got {type(value).__name__}")
    if not math.isfinite(number):  # YAML's .inf/.nan, or '1e400' overflowing
        raise SpecError(field, f"expected a finite {what} such as {examples}, got {value!r}")
    if number < 0:
        raise SpecError(field, f"must not be negative, got {value!r}")
    return number


def parse_rate(value, field: str) -> float:
    """Link rate in bits per second (``400G``, ``100Mbps``, a bare number is bit/s)."""
    return _parse(value, field, _RATE, "rate", "400G or 100Mbps")


def parse_size(value, field: str) -> float:
    """Size in bytes (``32MB``, ``64KiB``; decimal prefixes are powers of 1000)."""
    return _parse(value, field, _SIZE, "size", "32MB or 1500B")


def parse_duration(value, field: str) -> float:
    """Duration in seconds (``55us``, ``10ms``; a bare number is seconds)."""
    return _parse(value, field, _TIME, "duration", "55us or 10ms")


def parse_distance(value, field: str) -> float:
    """Distance in metres (``30km``; a bare number is metres)."""
    return _parse(value, field, _DIST, "distance", "30km or 500m")


def format_rate(bps: float) -> str:
    for unit, f in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= f:
            return f"{bps / f:.4g} {unit}"
    return f"{bps:.4g} bit/s"


def format_duration(seconds: float) -> str:
    for unit, f in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= f:
            return f"{seconds / f:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"


def format_size(nbytes: float) -> str:
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= f:
            return f"{nbytes / f:.4g} {unit}"
    return f"{nbytes:.4g} B"
