"""Small order statistics every layer reports with (a contract module: it imports nothing of the project,
so the RDMA endpoint, the PFC counters and the validation can share it without importing each other)."""

from __future__ import annotations

import math


def nearest_rank(values, q: float) -> float:
    """The ``q`` quantile of ``values`` by the nearest-rank rule (a value that occurred, never interpolated)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
