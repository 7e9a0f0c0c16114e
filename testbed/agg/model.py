"""A pure Python model of ``p4/aggregation.p4``: the rules the switch follows, packet by packet.

:class:`SlotPool` is the slot logic (bitmap, count, exponent, two copies per slot); the parameter server
runs the very same class, so the switch and its fallback cannot disagree. :class:`SwitchModel` adds
what the P4 ingress does around it: job table, validation with drop counters, ATP spill to the PS.
Integration tests send identical packets to the model and to a live ``simple_switch`` and compare.

    packet -> RESULT flag set ? -- yes -------------------------> drop BAD_FLAGS
              job_table ? -- miss ------------------------------> drop BAD_JOB
               count == ELEMS ? worker in members ? -- no ------> drop BAD_COUNT / BAD_WORKER
               slot < limit ? -- no ----------------------------> drop BAD_INDEX
               slot < size ? -- no -----------------------------> spill to PS (SPILL)
               SlotPool.contribute(base + slot, shadow, ...)
                   new bit, incomplete  -> drop (CONTRIB)
                   new bit, completes   -> multicast result (CONTRIB, COMPLETE)
                   old bit, complete    -> unicast stored result (SHADOW)
                   old bit, incomplete  -> drop (DUPLICATE)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from testbed.agg.protocol import ELEMS, FLAG_RESULT, FLAG_SPILL, MAX_WORKERS, AggHeader, Stat
from testbed.errors import SpecError

MULTICAST = "multicast"
UNICAST = "unicast"      # back to the sender (shadow copy)
SPILL = "spill"          # on to the parameter server
DROP = "drop"


@dataclass(frozen=True)
class Verdict:
    """What happens to one packet: ``action`` and, unless dropped, the packet that leaves."""

    action: str
    stat: Stat | None
    header: AggHeader | None = None
    values: np.ndarray | None = None


@dataclass
class _Slot:
    bitmap: int = 0
    count: int = 0
    exponent: int = 0
    values: np.ndarray = field(default_factory=lambda: np.zeros(ELEMS, dtype=np.int32))


class SlotPool:
    """Physical slots ``2 * index + shadow``; created lazily (the switch's registers start at zero)."""

    def __init__(self, elems: int = ELEMS):
        self.elems = elems
        self._slots: dict[int, _Slot] = {}

    def _slot(self, phys: int) -> _Slot:
        if phys not in self._slots:
            self._slots[phys] = _Slot(values=np.zeros(self.elems, dtype=np.int32))
        return self._slots[phys]

    def contribute(self, index: int, header: AggHeader, values: np.ndarray, n_workers: int) -> Verdict:
        """Apply one (validated) contribution to logical slot ``index``; see the module diagram."""
        phys = 2 * index + header.shadow
        s = self._slot(phys)
        wbit = 1 << header.worker
        if not s.bitmap & wbit:
            if s.bitmap == 0:
                s.count, s.exponent = 1, header.exponent
                s.values = values.astype(np.int32).copy()
            else:
                s.count += 1
                s.exponent = max(s.exponent, header.exponent)
                s.values = (s.values.astype(np.int64) + values).astype(np.int64)
                s.values = ((s.values + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)  # int32 wrap
            s.bitmap |= wbit
            other = self._slot(phys ^ 1)
            other.bitmap &= ~wbit
            if s.count != n_workers:
                return Verdict(DROP, Stat.CONTRIB)
            return Verdict(MULTICAST, Stat.COMPLETE, self._result(header, s), s.values.copy())
        if s.count != n_workers:
            return Verdict(DROP, Stat.DUPLICATE)
        return Verdict(UNICAST, Stat.SHADOW, self._result(header, s), s.values.copy())

    @staticmethod
    def _result(header: AggHeader, s: _Slot) -> AggHeader:
        return replace(header, flags=header.flags | FLAG_RESULT, exponent=s.exponent)

    def bitmap(self, index: int, shadow: int) -> int:
        return self._slot(2 * index + shadow).bitmap


@dataclass(frozen=True)
class JobEntry:
    """One ``job_table`` entry: the job's slot partition, its workers, its multicast group and PS.

    ``size`` slots live in the switch at ``base .. base + size - 1``; indices ``size .. limit - 1`` are
    valid but aggregated by the parameter server (ATP's fallback when switch memory is exhausted).
    """

    job: int
    base: int
    size: int
    limit: int
    members: int          # bitmap of worker ids
    mgrp: int
    ps_ip: str = "0.0.0.0"

    @property
    def n_workers(self) -> int:
        return bin(self.members).count("1")

    def __post_init__(self):
        if not 0 <= self.job <= 255:
            raise SpecError("job", f"must be in 0..255, got {self.job!r}")
        if not 0 <= self.size <= self.limit < 2 ** 15:
            raise SpecError(f"jobs.{self.job}.size", f"need 0 <= size <= limit < 32768, got "
                                                     f"size={self.size} limit={self.limit}")
        if not 0 < self.members < 2 ** MAX_WORKERS:
            raise SpecError(f"jobs.{self.job}.members", f"need 1..{MAX_WORKERS} workers, got {self.members:#x}")


def check_partitions(jobs: list[JobEntry], pool_slots: int) -> None:
    """Raise ``SpecError`` unless the jobs' switch slots are disjoint and inside the pool."""
    taken: dict[int, int] = {}
    for j in jobs:
        if j.base + j.size > pool_slots:
            raise SpecError(f"jobs.{j.job}.base", f"slots {j.base}..{j.base + j.size - 1} exceed the pool "
                                                  f"of {pool_slots}")
        for s in range(j.base, j.base + j.size):
            if s in taken:
                raise SpecError(f"jobs.{j.job}.base", f"slot {s} is also job {taken[s]}'s")
            taken[s] = j.job


class SwitchModel:
    """The ingress pipeline of ``aggregation.p4`` for packets addressed to the aggregator."""

    def __init__(self, jobs: list[JobEntry], elems: int = ELEMS):
        self.jobs = {j.job: j for j in jobs}
        self.elems = elems
        self.pool = SlotPool(elems)
        self.stats: Counter = Counter()

    def process(self, header: AggHeader, values: np.ndarray) -> Verdict:
        if header.flags & FLAG_RESULT:
            return self._count(Verdict(DROP, Stat.BAD_FLAGS))
        job = self.jobs.get(header.job)
        if job is None:
            return self._count(Verdict(DROP, Stat.BAD_JOB))
        if header.count != self.elems:
            return self._count(Verdict(DROP, Stat.BAD_COUNT))
        if header.worker >= MAX_WORKERS or not job.members >> header.worker & 1:
            return self._count(Verdict(DROP, Stat.BAD_WORKER))
        if header.slot >= job.limit:
            return self._count(Verdict(DROP, Stat.BAD_INDEX))
        if header.slot >= job.size:
            return self._count(Verdict(SPILL, Stat.SPILL, replace(header, flags=header.flags | FLAG_SPILL),
                                       values))
        v = self.pool.contribute(job.base + header.slot, header, values, job.n_workers)
        if v.stat is Stat.COMPLETE:               # the completing packet is a contribution too
            self.stats[Stat.CONTRIB] += 1
        return self._count(v)

    def _count(self, v: Verdict) -> Verdict:
        if v.stat is not None:
            self.stats[v.stat] += 1
        return v
