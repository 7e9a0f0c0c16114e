"""Marking profiles: a port's RED/ECN thresholds (and buffer) from its real-world rate and the path's RTT.

The one place these rules are written (DOMAIN.md): the replica plan applies them to BMv2 egress ports
(``Overrides.red_profile``), and the long-haul experiment prints the one it ran with. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.errors import SpecError


@dataclass(frozen=True)
class MarkingProfile:
    """RED/ECN thresholds of one port, in bytes (and packets of ``frame_bytes``)."""

    name: str
    kmin_bytes: float
    kmax_bytes: float
    pmax: float
    buffer_bytes: float | None
    frame_bytes: int

    def packets(self, nbytes: float | None) -> int | None:
        return None if nbytes is None else max(1, int(round(nbytes / self.frame_bytes)))

    def to_json(self) -> dict:
        return {"name": self.name, "kmin_bytes": self.kmin_bytes, "kmax_bytes": self.kmax_bytes, "pmax": self.pmax,
                "buffer_bytes": self.buffer_bytes, "kmin_pkts": self.packets(self.kmin_bytes),
                "kmax_pkts": self.packets(self.kmax_bytes), "buffer_pkts": self.packets(self.buffer_bytes),
                "frame_bytes": self.frame_bytes}


PROFILES = ("bdp", "per-25g")


def marking_profile(name: str, rate_bps: float, rtt_s: float, frame_bytes: int = 1082,
                    pmax: float = 0.2) -> MarkingProfile:
    """Kmin/Kmax (and buffer) of a port from its real-world rate and the path's RTT.

    * ``bdp`` (Juniper's long-haul profile, ConnectX-7 over 50-500 km): buffer 2.5 x BDP, Kmin 0.75 x BDP,
      Kmax 1.5 x BDP, with BDP = RTT x rate; Juniper does not publish Pmax: ``pmax`` (default 20%).
    * ``per-25g`` (Alibaba production): Kmin 100 KB x rate/25G, Kmax 400 KB x rate/25G, Pmax 20%; no buffer
      rule (None: the port's own).
    """
    if rate_bps <= 0:
        raise SpecError("marking.rate", f"must be positive, got {rate_bps!r}")
    if name == "bdp":
        if rtt_s <= 0:
            raise SpecError("marking.rtt", f"the bdp profile needs a positive RTT, got {rtt_s!r}")
        bdp = rtt_s * rate_bps / 8
        return MarkingProfile(name, 0.75 * bdp, 1.5 * bdp, pmax, 2.5 * bdp, frame_bytes)
    if name == "per-25g":
        share = rate_bps / 25e9
        return MarkingProfile(name, 100e3 * share, 400e3 * share, 0.2, None, frame_bytes)
    raise SpecError("marking.profile", f"unknown profile {name!r}; allowed: {', '.join(PROFILES)}")
