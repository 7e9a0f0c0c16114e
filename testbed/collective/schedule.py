"""Collective algorithms as per-rank lists of transfers (pure: no sockets, no root).

A schedule says, for every rank, what it sends to whom and what it does with what it receives, in
program order. Dependencies are not written by hand: :func:`hazard_deps` derives them from the buffer
regions the ops touch (read-after-write, write-after-read, write-after-write), so a ring step ``s + 1``
piece ``c`` waits only for piece ``c`` of step ``s`` and chunked algorithms pipeline by themselves::

    Op("send", peer=1, buf="data", offset=0,   count=256)             read  data[0:256]   -> rank 1
    Op("recv", peer=3, buf="data", offset=256, count=256, reduce=True) data[256:512] += from rank 3
    Op("copy", buf="out", offset=0, count=64, src_buf="data", src_offset=128)   local block (all-to-all)
    Op("delay", seconds=0.002)                                          a compute gap (trace replay)

Rules every executor keeps (the simulator in :mod:`testbed.collective.engine` and the soft-RDMA rank in
:mod:`testbed.collective.rank` share one engine):

* sends to one peer leave in program order, receives from one peer are matched in program order (an RC
  QP delivers SENDs in order and completes receive WRs in the order they were posted);
* a send reads its region when it is posted (the executor snapshots it), so a later write to the region
  only waits for the post;
* a receive lands in its own staging slot and is applied (copied or summed) once its dependencies are done.

Algorithms (``n`` ranks, ``count`` int32 elements per rank buffer, as nccl-tests counts them):

    allreduce       ring (reduce-scatter + all-gather, 2 (n-1) steps), tree (double binary tree: two
                    binary trees, each reduces half of the buffer to its root and broadcasts it back)
    reduce_scatter  ring, n-1 steps; rank r ends with the sum of segment r
    all_gather      ring, n-1 steps; rank r starts with segment r
    broadcast       ring pipeline from the root, chunked
    all_to_all      every rank sends block d of its buffer to rank d (uniform, or ``counts[src][dst]``
                    elements for skewed MoE dispatch)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from testbed.errors import SpecError

KINDS = ("send", "recv", "copy", "delay")
COLLECTIVES = ("allreduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
ALGORITHMS = {"allreduce": ("ring", "tree"), "reduce_scatter": ("ring",), "all_gather": ("ring",),
              "broadcast": ("ring",), "all_to_all": ("pairwise",)}
ELEMENT_BYTES = 4   # int32 payloads: sums are exact, so every element can be verified


@dataclass(frozen=True)
class Op:
    """One step of one rank; ``offset``/``count`` in elements of ``buf``."""

    kind: str
    peer: int = -1
    buf: str = "data"
    offset: int = 0
    count: int = 0
    reduce: bool = False
    src_buf: str = ""
    src_offset: int = 0
    seconds: float = 0.0

    def reads(self) -> tuple | None:
        if self.kind == "send":
            return (self.buf, self.offset, self.offset + self.count)
        if self.kind == "copy":
            return (self.src_buf, self.src_offset, self.src_offset + self.count)
        if self.kind == "recv" and self.reduce:
            return (self.buf, self.offset, self.offset + self.count)
        return None

    def writes(self) -> tuple | None:
        if self.kind in ("recv", "copy"):
            return (self.buf, self.offset, self.offset + self.count)
        return None


@dataclass(frozen=True)
class Schedule:
    """Ops per rank (program order), derived dependencies, and each rank's buffer sizes (elements)."""

    collective: str
    algorithm: str
    ranks: tuple                  # tuple[tuple[Op, ...], ...]
    buffers: tuple                # per rank: {buffer name: elements}
    count: int                    # elements of the nccl-tests "size" (size = count * ELEMENT_BYTES)
    root: int = 0
    counts: tuple | None = None   # all_to_all: elements [src][dst]
    deps: tuple = field(default=(), compare=False)

    @property
    def n(self) -> int:
        return len(self.ranks)

    def sent_elements(self, rank: int) -> int:
        return sum(op.count for op in self.ranks[rank] if op.kind == "send")


def _overlap(a: tuple | None, b: tuple | None) -> bool:
    return a is not None and b is not None and a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def hazard_deps(ops) -> tuple:
    """For each op, the earlier ops of the same rank it must wait for (RAW, WAR, WAW on its regions).

    Delays are barriers in program order (a compute gap separates what comes before from what follows).
    """
    deps = []
    last_delay = None
    for i, op in enumerate(ops):
        d = set()
        if last_delay is not None:
            d.add(last_delay)
        if op.kind == "delay":
            d.update(range(last_delay + 1 if last_delay is not None else 0, i))
            last_delay = i
        else:
            r, w = op.reads(), op.writes()
            start = last_delay + 1 if last_delay is not None else 0
            for j in range(start, i):
                prev = ops[j]
                pr, pw = prev.reads(), prev.writes()
                if _overlap(pw, r) or _overlap(pw, w) or _overlap(pr, w):
                    d.add(j)
        deps.append(tuple(sorted(d)))
    return tuple(deps)


def _finish(collective, algorithm, ranks, buffers, count, root=0, counts=None) -> Schedule:
    ranks = tuple(tuple(r) for r in ranks)
    return Schedule(collective, algorithm, ranks, tuple(buffers), count, root, counts,
                    tuple(hazard_deps(r) for r in ranks))


#: Most pipeline chunks per step: each is a message per rank and step, so the ops grow with it.
MAX_CHUNKS = 1024


def segments(count: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``(offset, count)`` ranges covering ``count`` elements (sizes differ by <= 1)."""
    bounds = [count * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1] - bounds[i]) for i in range(parts)]


def _pieces(offset: int, count: int, chunks: int) -> list[tuple[int, int]]:
    return [(offset + o, c) for o, c in segments(count, chunks) if c > 0]


def _check(n: int, count: int, chunks: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise SpecError("ranks", f"a collective needs at least 2 ranks, got {n!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < n:
        raise SpecError("count", f"must be an integer >= the number of ranks ({n}), got {count!r}")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= MAX_CHUNKS:
        raise SpecError("chunks", f"must be an integer in 1..{MAX_CHUNKS}, got {chunks!r}")


# -- ring family ----------------------------------------------------------------------------------
def _ring_steps(n: int, rank: int, count: int, chunks: int, phases: str) -> list[Op]:
    """Ring allreduce steps of ``rank`` ("rs" reduce-scatter, "ag" all-gather; "rs+ag" the allreduce).

    Reduce-scatter step s sends segment (r - s), receives (r - s - 1) and adds it: after n - 1 steps
    rank r holds the full sum of segment (r + 1). The all-gather step s sends (r + 1 - s) and copies
    (r - s) in, so each reduced segment travels round the ring once more.
    """
    plan = []
    if "rs" in phases:
        plan += [((rank - s) % n, (rank - s - 1) % n, True) for s in range(n - 1)]
    if "ag" in phases:
        plan += [((rank + 1 - s) % n, (rank - s) % n, False) for s in range(n - 1)]
    return _ring_ops(n, rank, segments(count, n), chunks, plan)


def _ring_ops(n: int, rank: int, segs, chunks: int, plan) -> list[Op]:
    """``rank``'s ops for ring steps ``plan`` = [(segment sent to succ, segment received from pred, reduce?)],
    each segment cut into ``chunks`` pieces and sends interleaved with receives so chunks pipeline."""
    succ, pred = (rank + 1) % n, (rank - 1) % n
    ops: list[Op] = []
    for send_seg, recv_seg, reduce in plan:
        sp = _pieces(*segs[send_seg], chunks)
        rp = _pieces(*segs[recv_seg], chunks)
        for k in range(max(len(sp), len(rp))):
            if k < len(sp):
                ops.append(Op("send", succ, "data", sp[k][0], sp[k][1]))
            if k < len(rp):
                ops.append(Op("recv", pred, "data", rp[k][0], rp[k][1], reduce=reduce))
    return ops


def ring_allreduce(n: int, count: int, chunks: int = 1) -> Schedule:
    _check(n, count, chunks)
    return _finish("allreduce", "ring", [_ring_steps(n, r, count, chunks, "rs+ag") for r in range(n)],
                   [{"data": count}] * n, count)


def ring_reduce_scatter(n: int, count: int, chunks: int = 1) -> Schedule:
    """Ring reduce-scatter, relabelled so rank r ends with segment r (as NCCL's output layout)."""
    _check(n, count, chunks)
    # shifted by one against the allreduce's reduce-scatter: rank r sends segment (r - s - 1), receives
    # (r - s - 2), so the last step (s = n - 2) completes segment r at rank r.
    segs = segments(count, n)
    ranks = [_ring_ops(n, r, segs, chunks, [((r - s - 1) % n, (r - s - 2) % n, True) for s in range(n - 1)])
             for r in range(n)]
    return _finish("reduce_scatter", "ring", ranks, [{"data": count}] * n, count)


def ring_all_gather(n: int, count: int, chunks: int = 1) -> Schedule:
    """Ring all-gather: rank r starts with segment r of ``data`` and ends with all of them."""
    _check(n, count, chunks)
    segs = segments(count, n)
    ranks = [_ring_ops(n, r, segs, chunks, [((r - s) % n, (r - s - 1) % n, False) for s in range(n - 1)])
             for r in range(n)]
    return _finish("all_gather", "ring", ranks, [{"data": count}] * n, count)


def ring_broadcast(n: int, count: int, chunks: int = 4, root: int = 0) -> Schedule:
    """Pipelined ring broadcast from ``root``: each chunk is forwarded as soon as it arrives."""
    _check(n, count, chunks)
    if not 0 <= root < n:
        raise SpecError("root", f"must be a rank 0..{n - 1}, got {root!r}")
    pieces = _pieces(0, count, chunks)
    ranks = []
    for r in range(n):
        pos = (r - root) % n
        succ, pred = (r + 1) % n, (r - 1) % n
        ops = []
        for off, c in pieces:
            if pos != 0:
                ops.append(Op("recv", pred, "data", off, c))
            if pos != n - 1:
                ops.append(Op("send", succ, "data", off, c))
        ranks.append(ops)
    return _finish("broadcast", "ring", ranks, [{"data": count}] * n, count, root=root)


# -- double binary tree -----------------------------------------------------------------------------
def nccl_btree(n: int, rank: int) -> tuple[int | None, list[int]]:
    """(parent, children) of ``rank`` in NCCL's binary tree rooted at 0 (``ncclGetBtree``, NCCL
    src/graph/trees.cc): a rank's lowest set bit gives its level; odd ranks are leaves."""
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    if rank == 0:
        return None, ([bit >> 1] if n > 1 else [])
    up = (rank ^ bit) | (bit << 1)
    if up >= n:
        up = rank ^ bit
    low = bit >> 1
    children = []
    if low:
        children.append(rank - low)
        while low and rank + low >= n:
            low >>= 1
        if low:
            children.append(rank + low)
    return up, children


def double_binary_tree(n: int) -> list[tuple[list, list]]:
    """NCCL's two trees (``ncclGetDtree``): the btree, and its mirror (n even) or shift by one (n odd), so
    each rank is a leaf in at least one of them and the two trees use opposite link directions."""
    trees = []
    for which in (0, 1):
        parent: list[int | None] = [None] * n
        children: list[list[int]] = [[] for _ in range(n)]
        for r in range(n):
            if which == 0:
                up, down = nccl_btree(n, r)
            elif n % 2:
                up, down = nccl_btree(n, (r - 1) % n)
                up = None if up is None else (up + 1) % n
                down = [(d + 1) % n for d in down]
            else:
                up, down = nccl_btree(n, n - 1 - r)
                up = None if up is None else n - 1 - up
                down = [n - 1 - d for d in down]
            parent[r], children[r] = up, down
        trees.append((parent, children))
    return trees


def tree_allreduce(n: int, count: int, chunks: int = 4) -> Schedule:
    """Double binary tree allreduce: half the buffer up and down tree 0, half up and down tree 1.

    Per chunk, a rank receives (and adds) its children's partial sums, sends the sum to its parent, then
    receives the result from its parent and sends it to its children. Chunks pipeline through the tree.
    Two trees on halves keep every rank's links busy in both directions (Sanders et al., 2009; NCCL 2.4).
    """
    _check(n, count, chunks)
    trees = double_binary_tree(n)
    halves = segments(count, 2)
    ranks: list[list[Op]] = [[] for _ in range(n)]
    for r in range(n):
        ups, downs = [], []
        for (parent, children), (hoff, hcount) in zip(trees, halves, strict=True):
            for off, c in _pieces(hoff, hcount, chunks):
                up = [Op("recv", ch, "data", off, c, reduce=True) for ch in children[r]]
                if parent[r] is not None:
                    up.append(Op("send", parent[r], "data", off, c))
                down = [Op("recv", parent[r], "data", off, c)] if parent[r] is not None else []
                down += [Op("send", ch, "data", off, c) for ch in children[r]]
                ups.append(up)
                downs.append(down)
        # interleave: all reductions first in chunk order, each broadcast after its own chunk's reduction
        for k in range(len(ups)):
            ranks[r].extend(ups[k])
        for k in range(len(downs)):
            ranks[r].extend(downs[k])
    return _finish("allreduce", "tree", ranks, [{"data": count}] * n, count)


# -- all-to-all -------------------------------------------------------------------------------------
def uniform_counts(n: int, count: int) -> list[list[int]]:
    """Elements rank src sends rank dst when each rank's ``count`` elements are split evenly."""
    return [[c for _, c in segments(count, n)] for _ in range(n)]


def skewed_counts(n: int, count: int, hot: int = 0, factor: float = 4.0) -> list[list[int]]:
    """MoE dispatch with one hot expert: every rank sends rank ``hot`` ``factor`` times the share it sends
    each other rank (``count`` elements per rank in all)."""
    if not 0 <= hot < n:
        raise SpecError("hot", f"must be a rank 0..{n - 1}, got {hot!r}")
    if not factor >= 1:
        raise SpecError("skew", f"must be >= 1 (1 is uniform), got {factor!r}")
    weights = [factor if d == hot else 1.0 for d in range(n)]
    total = sum(weights)
    out = []
    for _ in range(n):
        row = [int(count * w / total) for w in weights]
        row[hot] += count - sum(row)
        out.append(row)
    return out


def incast_counts(n: int, count: int, sink: int = 0) -> list[list[int]]:
    """N:1 incast as an all-to-all: every rank but ``sink`` sends its whole buffer (``count``) to ``sink``
    at once (SONiC's RoCEv2 incast test; per-QP fairness is read from each sender's finish time)."""
    if not 0 <= sink < n:
        raise SpecError("incast", f"must be a rank 0..{n - 1}, got {sink!r}")
    return [[count if d == sink and s != sink else 0 for d in range(n)] for s in range(n)]


def all_to_all(n: int, count: int, counts: list[list[int]] | None = None, chunks: int = 1) -> Schedule:
    """Pairwise all-to-all: at step s rank r sends its block for (r + s) and receives from (r - s).

    ``data`` holds rank r's blocks in destination order, ``out`` receives blocks in source order; the
    block a rank keeps for itself is a local copy.
    """
    _check(n, count, chunks)
    counts = counts or uniform_counts(n, count)
    if len(counts) != n or any(len(row) != n or any(c < 0 for c in row) for row in counts):
        raise SpecError("counts", f"must be {n} rows of {n} non-negative element counts")
    send_off = [[sum(counts[s][:d]) for d in range(n)] for s in range(n)]
    recv_off = [[sum(counts[s][d] for s in range(src)) for src in range(n)] for d in range(n)]
    ranks, buffers = [], []
    for r in range(n):
        ops = [Op("copy", -1, "out", recv_off[r][r], counts[r][r], src_buf="data", src_offset=send_off[r][r])]
        for s in range(1, n):
            dst, src = (r + s) % n, (r - s) % n
            for off, c in _pieces(send_off[r][dst], counts[r][dst], chunks):
                ops.append(Op("send", dst, "data", off, c))
            for off, c in _pieces(recv_off[r][src], counts[src][r], chunks):
                ops.append(Op("recv", src, "out", off, c))
        ranks.append([op for op in ops if op.count > 0])
        buffers.append({"data": sum(counts[r]), "out": sum(counts[s][r] for s in range(n))})
    return _finish("all_to_all", "pairwise", ranks, buffers, count, counts=tuple(tuple(x) for x in counts))


def build(collective: str, n: int, count: int, algorithm: str | None = None, chunks: int = 1,
          root: int = 0, counts=None) -> Schedule:
    """The schedule of one collective (the one entry point executors and the trace replayer use)."""
    if collective not in COLLECTIVES:
        raise SpecError("collective", f"unknown collective {collective!r}; allowed: {', '.join(COLLECTIVES)}")
    algorithm = algorithm or ALGORITHMS[collective][0]
    if algorithm not in ALGORITHMS[collective]:
        raise SpecError("algorithm", f"{collective} runs as {', '.join(ALGORITHMS[collective])}, not {algorithm!r}")
    if collective == "allreduce":
        return ring_allreduce(n, count, chunks) if algorithm == "ring" else tree_allreduce(n, count, chunks)
    if collective == "reduce_scatter":
        return ring_reduce_scatter(n, count, chunks)
    if collective == "all_gather":
        return ring_all_gather(n, count, chunks)
    if collective == "broadcast":
        return ring_broadcast(n, count, chunks, root)
    return all_to_all(n, count, counts, chunks)
