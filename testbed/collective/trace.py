"""A small JSON workload trace and its compilation into one schedule (pure).

Format (``version`` 1; sizes in bytes, multiples of 4; compute gaps in real-world seconds, dilated by the
replica's scale when replayed)::

    {"version": 1,
     "ranks": 4,
     "iterations": 2,                          # optional (1): the whole trace repeated, a training step each
     "ops": [                                  # one list per rank, in program order
       [{"id": "fwd",  "type": "compute", "seconds": 0.002},
        {"id": "grad", "type": "collective", "collective": "allreduce", "bytes": 1048576,
         "algorithm": "ring", "deps": ["fwd"]},
        {"id": "act",  "type": "send", "peer": 1, "bytes": 65536, "deps": ["fwd"]},
        {"id": "prev", "type": "recv", "peer": 3, "bytes": 65536}],
       ...]}

* ``deps`` names ops of the same rank that must finish first; without ``deps`` an op waits for the op
  before it (program order). Ops without a dependency between them overlap (a send during a compute gap).
* Collectives are called in the same order on every rank with the same collective, bytes and algorithm
  (as NCCL requires); a ``send`` to a peer pairs with that peer's ``recv`` from this rank, in order.
* Messages between two ranks travel in one queue (one RC QP), so both sides must post them in the same
  order: :func:`check` simulates the compiled trace and names the first mismatch or deadlock.

Replay reports the step time (iteration end to end) and when each op finished on each rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.collective import schedule as S
from testbed.errors import SpecError

TYPES = ("compute", "collective", "send", "recv")
_KEYS = {"compute": {"id", "type", "seconds", "deps"},
         "collective": {"id", "type", "collective", "bytes", "algorithm", "deps", "root"},
         "send": {"id", "type", "peer", "bytes", "deps"},
         "recv": {"id", "type", "peer", "bytes", "deps"}}
TOP_KEYS = {"version", "ranks", "iterations", "ops", "description"}


@dataclass(frozen=True)
class TraceOp:
    id: str
    type: str
    deps: tuple
    seconds: float = 0.0
    collective: str = ""
    bytes: int = 0
    algorithm: str | None = None
    root: int = 0
    peer: int = -1


@dataclass(frozen=True)
class Trace:
    ranks: int
    iterations: int
    ops: tuple           # per rank: tuple[TraceOp, ...]


def _int(value, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(field, f"must be an integer >= {minimum}, got {value!r}")
    return value


def load_trace(doc) -> Trace:
    """Validate a trace document (dict); every error names its field, e.g. ``ops[1][0].bytes``."""
    if not isinstance(doc, dict):
        raise SpecError("trace", "must be a JSON object with version, ranks and ops")
    unknown = sorted(set(doc) - TOP_KEYS)
    if unknown:
        raise SpecError(f"trace.{unknown[0]}", f"unknown key; allowed: {', '.join(sorted(TOP_KEYS))}")
    if doc.get("version") != 1:
        raise SpecError("trace.version", f"must be 1, got {doc.get('version')!r}")
    n = _int(doc.get("ranks"), "trace.ranks", 2)
    iterations = _int(doc.get("iterations", 1), "trace.iterations", 1)
    ops = doc.get("ops")
    if not isinstance(ops, list) or len(ops) != n:
        raise SpecError("trace.ops", f"must be a list of {n} per-rank lists")
    ranks = []
    for r, rank_ops in enumerate(ops):
        if not isinstance(rank_ops, list):
            raise SpecError(f"ops[{r}]", "must be a list of ops")
        seen: dict = {}          # ids so far, in order (a dict: converted traces have thousands of ops)
        out = []
        for i, op in enumerate(rank_ops):
            out.append(_load_op(op, f"ops[{r}][{i}]", n, r, seen))
            seen[out[-1].id] = None
        ranks.append(tuple(out))
    colls = [[(o.collective, o.bytes, o.algorithm, o.root) for o in rk if o.type == "collective"] for rk in ranks]
    for r in range(1, n):
        if colls[r] != colls[0]:
            raise SpecError(f"ops[{r}]", f"calls collectives {colls[r]} but rank 0 calls {colls[0]}; every rank must "
                                         "call the same collectives in the same order")
    return Trace(n, iterations, tuple(ranks))


def _load_op(op, field: str, n: int, rank: int, seen: dict) -> TraceOp:
    if not isinstance(op, dict):
        raise SpecError(field, "must be an object")
    kind = op.get("type")
    if kind not in TYPES:
        raise SpecError(f"{field}.type", f"must be one of {', '.join(TYPES)}, got {kind!r}")
    unknown = sorted(set(op) - _KEYS[kind])
    if unknown:
        raise SpecError(f"{field}.{unknown[0]}", f"unknown key for a {kind} op; allowed: {', '.join(sorted(_KEYS[kind]))}")
    oid = op.get("id", f"op{len(seen)}")
    if not isinstance(oid, str) or not oid or oid in seen:
        raise SpecError(f"{field}.id", f"must be a name unique on this rank, got {oid!r}")
    deps = op.get("deps", [next(reversed(seen))] if seen else [])
    if not isinstance(deps, list) or any(not isinstance(d, str) or d not in seen for d in deps):
        raise SpecError(f"{field}.deps", f"must name earlier ops of rank {rank} ({', '.join(seen) or 'none'})")
    if kind == "compute":
        sec = op.get("seconds")
        if isinstance(sec, bool) or not isinstance(sec, (int, float)) or not 0 <= sec < 3600:
            raise SpecError(f"{field}.seconds", f"must be a number of seconds in [0, 3600), got {sec!r}")
        return TraceOp(oid, kind, tuple(deps), seconds=float(sec))
    size = _int(op.get("bytes"), f"{field}.bytes", 4)
    if size % S.ELEMENT_BYTES:
        raise SpecError(f"{field}.bytes", f"must be a multiple of {S.ELEMENT_BYTES} (int32 elements), got {size}")
    if kind == "collective":
        coll = op.get("collective")
        if coll not in S.COLLECTIVES:
            raise SpecError(f"{field}.collective", f"must be one of {', '.join(S.COLLECTIVES)}, got {coll!r}")
        algo = op.get("algorithm")
        if algo is not None and algo not in S.ALGORITHMS[coll]:
            raise SpecError(f"{field}.algorithm", f"{coll} runs as {', '.join(S.ALGORITHMS[coll])}, got {algo!r}")
        if size // S.ELEMENT_BYTES < n:
            raise SpecError(f"{field}.bytes", f"must hold at least one int32 per rank ({4 * n} B), got {size}")
        root = _int(op.get("root", 0), f"{field}.root", 0)
        if root >= n:
            raise SpecError(f"{field}.root", f"must be a rank 0..{n - 1}, got {root}")
        return TraceOp(oid, kind, tuple(deps), collective=coll, bytes=size, algorithm=algo, root=root)
    peer = _int(op.get("peer"), f"{field}.peer", 0)
    if peer >= n or peer == rank:
        raise SpecError(f"{field}.peer", f"must be another rank 0..{n - 1}, got {peer}")
    return TraceOp(oid, kind, tuple(deps), bytes=size, peer=peer)


@dataclass(frozen=True)
class Group:
    """Where one trace op landed in the compiled schedule of one rank."""

    iteration: int
    id: str
    type: str
    first: int            # index of its first op
    end: int              # index of its end marker (a zero delay that waits for all its ops)
    job: int              # payload seed of its data: a p2p message's is the same on both sides
    sub: object = None    # the collective's own schedule (verification)


def compile_trace(trace: Trace, scale: float = 1.0, chunks: int = 1) -> tuple[S.Schedule, list[list[Group]]]:
    """One schedule for the whole trace (all iterations) and, per rank, where each op is in it."""
    n = trace.ranks
    subs: dict = {}
    ranks_ops, ranks_deps, buffers, groups = [], [], [], []
    for r in range(n):
        ops: list[S.Op] = []
        deps: list[tuple] = []
        bufs: dict = {}
        gs: list[Group] = []
        prev_end = None
        for it in range(trace.iterations):
            ends: dict = {}
            nth: dict = {}     # (send|recv, peer) -> messages so far: the payload seed both sides agree on
            for k, top in enumerate(trace.ops[r]):
                # its own dependencies, and the end of the previous iteration (a step boundary)
                start = [ends[d] for d in top.deps] + ([prev_end] if prev_end is not None else [])
                tag = f"{it}.{top.id}"
                job = 1000 * (it + 1) + k
                if top.type in ("send", "recv"):
                    key = (top.type, top.peer)
                    nth[key] = nth.get(key, 0) + 1
                    job = 1000 * (it + 1) + 500 + nth[key]
                first = len(ops)
                sub = None
                if top.type == "compute":
                    ops.append(S.Op("delay", seconds=top.seconds * scale))
                    deps.append(tuple(start))
                elif top.type == "collective":
                    key = (top.collective, top.algorithm, top.bytes, top.root)
                    sub = subs.get(key) or subs.setdefault(key, S.build(
                        top.collective, n, top.bytes // S.ELEMENT_BYTES, top.algorithm, chunks, top.root))
                    for op, d in zip(sub.ranks[r], sub.deps[r], strict=True):
                        ops.append(_retag(op, tag))
                        deps.append(tuple(sorted(set(start) | {first + j for j in d})))
                    for name, size in sub.buffers[r].items():
                        bufs[f"{tag}:{name}"] = size
                else:
                    ops.append(S.Op(top.type, top.peer, f"{tag}:data", 0, top.bytes // S.ELEMENT_BYTES))
                    deps.append(tuple(start))
                    bufs[f"{tag}:data"] = top.bytes // S.ELEMENT_BYTES
                ops.append(S.Op("delay", seconds=0.0))
                deps.append(tuple(range(first, len(ops) - 1)) or tuple(start))
                ends[top.id] = len(ops) - 1
                gs.append(Group(it, top.id, top.type, first, len(ops) - 1, job, sub))
            end_all = len(ops)
            ops.append(S.Op("delay", seconds=0.0))
            deps.append(tuple(ends.values()))
            prev_end = end_all
        ranks_ops.append(tuple(ops))
        ranks_deps.append(tuple(deps))
        buffers.append(bufs)
        groups.append(gs)
    sched = S.Schedule("trace", "trace", tuple(ranks_ops), tuple(buffers), 0, deps=tuple(ranks_deps))
    return sched, groups


def _retag(op: S.Op, tag: str) -> S.Op:
    from dataclasses import replace

    return replace(op, buf=f"{tag}:{op.buf}" if op.kind != "delay" else op.buf,
                   src_buf=f"{tag}:{op.src_buf}" if op.src_buf else "")


def check(trace: Trace) -> dict:
    """Simulate the compiled trace in memory (zero-time network, compute gaps as given): raises
    :class:`~testbed.collective.engine.ScheduleError` naming a mismatch or deadlock; returns the stats."""
    import numpy as np

    from testbed.collective.engine import simulate

    sched, _ = compile_trace(trace)
    inputs = [{k: np.zeros(v, dtype=np.int32) for k, v in b.items()} for b in sched.buffers]
    return simulate(sched, inputs)[1]
