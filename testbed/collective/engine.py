"""The per-rank progress engine of a schedule, and an in-memory simulator built on it (pure).

:class:`RankEngine` knows which ops of one rank may run: an op is *ready* when the ops it depends on are
done; a ready send also waits for the earlier sends to the same peer (FIFO per peer, as one RC QP); a
ready receive waits for its message; a delay for its deadline. The executor supplies the data movement
through two callbacks, ``post(i)`` (snapshot and send op ``i``) and ``apply(i)`` (copy or add a received
or local block), and calls :meth:`RankEngine.arrived` when a receive completes::

    executor loop:   engine.advance(now, post, apply)  ->  device progress  ->  completions -> arrived(i)

:func:`simulate` runs every rank's engine over in-memory channels: it proves a schedule complete (every
send matched by a receive of the same size, no deadlock) and computes the data it produces, which the
tests compare with numpy references computed independently (:mod:`testbed.collective.verify`).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from testbed.errors import TestbedError


class ScheduleError(TestbedError):
    """A schedule that cannot complete: unmatched transfer, size mismatch or deadlock."""


class RankEngine:
    """Progress state of one rank's ops (``deps`` from :func:`testbed.collective.schedule.hazard_deps`)."""

    def __init__(self, ops, deps):
        self.ops, self.deps = ops, deps
        n = len(ops)
        self.done = [False] * n
        self.finished_at: list[float | None] = [None] * n
        self.remaining = n
        self._missing = [len(d) for d in deps]
        self._dependents: list[list[int]] = [[] for _ in range(n)]
        for i, d in enumerate(deps):
            for j in d:
                self._dependents[j].append(i)
        self._ready = {i for i in range(n) if not self._missing[i]}
        self._sends: dict[int, deque] = {}
        self.recvs: dict[int, list[int]] = {}       # peer -> receive ops in program order
        for i, op in enumerate(ops):
            if op.kind == "send":
                self._sends.setdefault(op.peer, deque()).append(i)
            elif op.kind == "recv":
                self.recvs.setdefault(op.peer, []).append(i)
        self._arrived: set[int] = set()
        self._deadline: dict[int, float] = {}

    @property
    def finished(self) -> bool:
        return self.remaining == 0

    def arrived(self, i: int) -> None:
        self._arrived.add(i)

    def _complete(self, i: int, now: float) -> None:
        self.done[i] = True
        self.finished_at[i] = now
        self.remaining -= 1
        self._ready.discard(i)
        for c in self._dependents[i]:
            self._missing[c] -= 1
            if not self._missing[c]:
                self._ready.add(c)

    def advance(self, now: float, post, apply) -> int:
        """Run every op that can run now; returns how many did."""
        did = 0
        changed = True
        while changed:
            changed = False
            for i in sorted(self._ready):
                op = self.ops[i]
                if op.kind == "send":
                    q = self._sends[op.peer]
                    if q[0] != i:
                        continue
                    q.popleft()
                    post(i)
                elif op.kind == "recv":
                    if i not in self._arrived:
                        continue
                    apply(i)
                elif op.kind == "copy":
                    apply(i)
                else:
                    end = self._deadline.setdefault(i, now + op.seconds)
                    if now < end:
                        continue
                self._complete(i, now)
                did += 1
                changed = True
        return did

    def next_deadline(self) -> float | None:
        """When the earliest running delay ends (None: none running)."""
        pending = [t for i, t in self._deadline.items() if not self.done[i]]
        return min(pending) if pending else None

    def pending(self) -> list[int]:
        return [i for i in range(len(self.ops)) if not self.done[i]]


def apply_block(op, buffers: dict, block: np.ndarray) -> None:
    """Copy or add ``block`` into ``op``'s region (int32 sums wrap, as a NIC's or a switch's would)."""
    dst = buffers[op.buf][op.offset:op.offset + op.count]
    if op.reduce:
        np.add(dst, block, out=dst, casting="unsafe")
    else:
        dst[:] = block


def simulate(schedule, inputs: list[dict]) -> tuple[list[dict], dict]:
    """Execute ``schedule`` in memory; returns (final buffers per rank, stats).

    ``inputs``: per rank ``{buffer: int32 array}`` (copied, not modified). Stats: elements each rank sent,
    and ``rounds`` (how many passes over the ranks it took, a latency-depth measure).

    Raises:
        ScheduleError: a send without a matching receive, a size mismatch, or a deadlock (names the rank
            and its first pending op).
    """
    n = schedule.n
    bufs = [{k: np.array(v, dtype=np.int32, copy=True) for k, v in inputs[r].items()} for r in range(n)]
    engines = [RankEngine(schedule.ranks[r], schedule.deps[r]) for r in range(n)]
    next_recv = {(r, p): 0 for r in range(n) for p in engines[r].recvs}
    staged: list[dict[int, np.ndarray]] = [{} for _ in range(n)]
    sent = [0] * n
    now, rounds = 0.0, 0

    def poster(r):
        def post(i):
            op = schedule.ranks[r][i]
            dst = op.peer
            if not 0 <= dst < n or dst == r:
                raise ScheduleError(f"rank {r} op {i}: send to rank {dst!r}")
            k = next_recv.get((dst, r))
            want = engines[dst].recvs.get(r, [])
            if k is None or k >= len(want):
                raise ScheduleError(f"rank {r} op {i}: send to rank {dst} has no matching receive")
            j = want[k]
            if schedule.ranks[dst][j].count != op.count:
                raise ScheduleError(f"rank {r} op {i} sends {op.count} elements; rank {dst} op {j} expects "
                                    f"{schedule.ranks[dst][j].count}")
            next_recv[(dst, r)] = k + 1
            staged[dst][j] = bufs[r][op.buf][op.offset:op.offset + op.count].copy()
            engines[dst].arrived(j)
            sent[r] += op.count
        return post

    def applier(r):
        def apply(i):
            op = schedule.ranks[r][i]
            if op.kind == "copy":
                block = bufs[r][op.src_buf][op.src_offset:op.src_offset + op.count].copy()
            else:
                block = staged[r].pop(i)
            apply_block(op, bufs[r], block)
        return apply

    posts = [poster(r) for r in range(n)]
    applies = [applier(r) for r in range(n)]
    while not all(e.finished for e in engines):
        rounds += 1
        did = sum(e.advance(now, posts[r], applies[r]) for r, e in enumerate(engines))
        if did:
            continue
        deadlines = [d for d in (e.next_deadline() for e in engines) if d is not None]
        if deadlines:
            now = max(now, min(deadlines))
            continue
        r = next(r for r, e in enumerate(engines) if not e.finished)
        i = engines[r].pending()[0]
        raise ScheduleError(f"deadlock: rank {r} cannot run op {i} ({schedule.ranks[r][i]})")
    leftover = [(r, p) for (r, p), k in next_recv.items() if k != len(engines[r].recvs[p])]
    if leftover:
        raise ScheduleError(f"rank {leftover[0][0]} expects more data from rank {leftover[0][1]}")
    return bufs, {"sent_elements": sent, "rounds": rounds, "time_s": now}
