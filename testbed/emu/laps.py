"""Stage timings of a long operation (a replica's teardown, ``testbed clean``'s steps).

``bench build`` prints them so a slow stage is named, not guessed: at k=16 the bridges took 92 s of a 114 s
teardown. One way to time stages, shared by :mod:`testbed.emu.replica` and :mod:`testbed.emu.registry`.
"""

from __future__ import annotations

import time


class Laps:
    """``lap(name)`` records the seconds since the previous lap (or since it was made) under ``name``."""

    def __init__(self, into: dict):
        self.into, self.t = into, time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.into[name] = round(now - self.t, 3)
        self.t = now
