"""Time dilation: one factor maps the real fabric onto the emulated one.

A replica runs ``scale`` times slower than the fabric it models (Gupta et al., NSDI'06)::

    real                     emulated
    rate R          ->       R / scale
    delay, timer T  ->       T * scale
    buffer B pkts   ->       B pkts          (kept in packets, MTU unchanged)

so these dimensionless quantities are preserved exactly:

    BDP in packets   = R * RTT / (8 * MTU)       (R/scale * RTT*scale)
    buffer / BDP     = B / BDP
    timer / RTT      = T / RTT                   (e.g. DCQCN 55 us vs a 300 us long-haul RTT)

Byte quantities that the real system counts (DCQCN's byte counter, RED thresholds in KB) are therefore
kept in bytes, since the packet size is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.errors import SpecError


@dataclass(frozen=True)
class Dilation:
    """The time-dilation factor of one replica (``scale`` >= 1 slows time down)."""

    scale: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.scale, (int, float)) and 0 < self.scale < float("inf")):
            raise SpecError("scale", f"must be a positive finite number, got {self.scale!r}")

    def rate(self, real_bps: float) -> float:
        """Emulated rate for a real one (bits/s)."""
        return real_bps / self.scale

    def time(self, real_s: float) -> float:
        """Emulated duration (delay, timer, interval) for a real one (seconds)."""
        return real_s * self.scale

    def real_time(self, emulated_s: float) -> float:
        """Undo the dilation of a measured duration."""
        return emulated_s / self.scale

    def real_rate(self, emulated_bps: float) -> float:
        """Undo the dilation of a measured rate."""
        return emulated_bps * self.scale


def pick_scale(busiest_link_bps: float, machine_bps: float = 100e6) -> float:
    """Smallest power-of-ten-ish factor that brings the busiest link under what the machine forwards.

    ``machine_bps`` is a per-link budget that userspace switches on a small machine sustain; the result
    is rounded up to 1, 2 or 5 times a power of ten so that mappings stay readable.
    """
    if busiest_link_bps <= machine_bps:
        return 1.0
    need = busiest_link_bps / machine_bps
    power = 1.0
    while True:
        for m in (1, 2, 5):
            if m * power >= need:
                return float(m * power)
        power *= 10
