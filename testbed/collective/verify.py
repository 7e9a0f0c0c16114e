"""Integer payloads and what each collective must produce from them (pure numpy references).

Every rank's input is drawn from a seeded generator (small int32 values, so sums never overflow); the
expected output is computed here from the inputs alone, with numpy and the collective's definition,
never from a schedule. A rank counts the elements that differ: nccl-tests' ``#wrong``.

    allreduce       data = sum_r x_r
    reduce_scatter  data[segment r] = sum over ranks of x[segment r]      (only segment r is checked)
    all_gather      data[segment j] = x_j[segment j]                        (rank r starts with segment r)
    broadcast       data = x_root
    all_to_all      out[block from s] = x_s[block s sends to r]
"""

from __future__ import annotations

import numpy as np

from testbed.collective.schedule import segments


def make_input(seed: int, job: int, rank: int, count: int) -> np.ndarray:
    rng = np.random.default_rng([seed, job, rank])
    return rng.integers(-1000, 1000, size=count, dtype=np.int32)


def initial_buffers(schedule, rank: int, seed: int = 1, job: int = 1) -> dict:
    """The buffers rank ``rank`` starts with."""
    sizes = schedule.buffers[rank]
    x = make_input(seed, job, rank, sizes["data"])
    kind, n = schedule.collective, schedule.n
    if kind == "all_gather":
        data = np.zeros(sizes["data"], dtype=np.int32)
        off, c = segments(schedule.count, n)[rank]
        data[off:off + c] = x[off:off + c]
        x = data
    elif kind == "broadcast" and rank != schedule.root:
        x = np.zeros(sizes["data"], dtype=np.int32)
    bufs = {"data": x}
    if "out" in sizes:
        bufs["out"] = np.zeros(sizes["out"], dtype=np.int32)
    return bufs


def expected(schedule, rank: int, seed: int = 1, job: int = 1) -> tuple[str, int, np.ndarray]:
    """(buffer, offset, values) rank ``rank`` must hold at the end."""
    kind, n, count = schedule.collective, schedule.n, schedule.count
    xs = [make_input(seed, job, r, schedule.buffers[r]["data"]) for r in range(n)]
    if kind == "allreduce":
        return "data", 0, np.sum(np.stack(xs).astype(np.int64), axis=0).astype(np.int32)
    if kind == "reduce_scatter":
        off, c = segments(count, n)[rank]
        return "data", off, np.sum(np.stack([x[off:off + c] for x in xs]).astype(np.int64), axis=0).astype(np.int32)
    if kind == "all_gather":
        return "data", 0, np.concatenate([xs[j][o:o + c] for j, (o, c) in enumerate(segments(count, n))])
    if kind == "broadcast":
        return "data", 0, xs[schedule.root]
    counts = schedule.counts
    blocks = []
    for s in range(n):
        start = sum(counts[s][:rank])
        blocks.append(xs[s][start:start + counts[s][rank]])
    return "out", 0, np.concatenate(blocks)


def wrong(schedule, rank: int, buffers: dict, seed: int = 1, job: int = 1) -> int:
    """How many elements of rank ``rank``'s result differ from the reference (nccl-tests' #wrong)."""
    buf, off, want = expected(schedule, rank, seed, job)
    got = buffers[buf][off:off + len(want)]
    return int(np.count_nonzero(got != want)) + max(0, len(want) - len(got))
