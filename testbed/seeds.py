"""Seeds of a run's random draws (pure): one base seed per run, a derived seed per part of it.

A run whose parts draw random numbers (a delay line's RED marks and losses, one per link of a replica or
one per experiment of ``testbed validate``) takes one base seed and records it with its results; each
part gets ``derive(base, label)``. The same base repeats every part's draws exactly; different parts
(and different bases) get different sequences, so repetitions of a run sample the randomness instead of
replaying one draw. ``testbed.links.core.direction_seeds`` then splits a link's seed into its two
directions' seeds.
"""

from __future__ import annotations

import random
import zlib

#: seeds are non-negative 31-bit integers (what every consumer accepts; the mask keeps ``derive`` in range)
SEED_LIMIT = 1 << 31


def derive(base: int, label: str) -> int:
    """The seed of the part named ``label`` of a run seeded with ``base``: base XOR CRC-32(label), 31 bits.

    Distinct labels under one base always differ (their CRCs do); the replica plan's link seeds
    (label ``"u|v"``) and ``testbed validate``'s experiment seeds both come from here.
    """
    return (int(base) ^ zlib.crc32(label.encode())) & (SEED_LIMIT - 1)


def draw() -> int:
    """A fresh base seed from the OS, for a run not given one (record it: it repeats the run)."""
    return random.SystemRandom().randrange(SEED_LIMIT)
