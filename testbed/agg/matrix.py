"""The run matrix of the in-network all-reduce experiment (``scenarios/specs/allreduce.yaml``), pure.

    YAML --load_spec()--> Spec (axes validated, --quick axes applied) --trials()--> one factor at a time
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.errors import SpecError
from testbed.units import parse_rate

#: a switch run whose worker links carried less than this fraction of their rate was limited by BMv2, not
#: by the links (the experiment's rates are chosen so that links are the bottleneck)
SATURATION_UTILISATION = 0.5
#: the spec every in-network run takes its switch budget and window from
SPEC_NAME = "allreduce.yaml"

AXES = ("topologies", "workers", "sizes_mb", "loss_pct", "jobs")
KEYS = {"name", "switch_budget", "window", "dtype", "quick", *AXES}


@dataclass(frozen=True)
class Spec:
    switch_budget_bps: float
    window: int
    dtype: str
    topologies: tuple
    workers: tuple
    sizes_mb: tuple
    loss_pct: tuple
    jobs: tuple


def load_spec(doc: dict, quick: bool) -> Spec:
    """Validate the YAML document (unknown keys and bad values name the field)."""
    if not isinstance(doc, dict):
        raise SpecError("spec", "must be a mapping")
    for key in doc:
        if key not in KEYS:
            raise SpecError(key, f"unknown key; allowed: {', '.join(sorted(KEYS))}")
    axes = {a: doc.get(a) for a in AXES}
    if quick:
        q = doc.get("quick") or {}
        for key in q:
            if key not in AXES:
                raise SpecError(f"quick.{key}", f"unknown key; allowed: {', '.join(AXES)}")
        axes.update(q)
    for a, v in axes.items():
        if not isinstance(v, list) or not v:
            raise SpecError(a, f"must be a non-empty list, got {v!r}")
    for t in axes["topologies"]:
        if t not in ("leaf", "leaf-spine"):
            raise SpecError("topologies", f"{t!r} is not one of: leaf, leaf-spine")
    for w in axes["workers"]:
        if not isinstance(w, int) or not 2 <= w <= 16:
            raise SpecError("workers", f"must be integers in 2..16, got {w!r}")
    for s in axes["sizes_mb"]:
        if not isinstance(s, (int, float)) or not 0 < s <= 64:
            raise SpecError("sizes_mb", f"must be in (0, 64] MB, got {s!r}")
    for p in axes["loss_pct"]:
        if not isinstance(p, (int, float)) or not 0 <= p < 50:
            raise SpecError("loss_pct", f"must be in [0, 50), got {p!r}")
    for j in axes["jobs"]:
        if j not in (1, 2):
            raise SpecError("jobs", f"must be 1 or 2, got {j!r}")
    dtype = doc.get("dtype", "int32")
    if dtype not in ("int32", "float32"):
        raise SpecError("dtype", f"must be int32 or float32, got {dtype!r}")
    window = doc.get("window", 16)
    if not isinstance(window, int) or not 1 <= window <= 512:
        raise SpecError("window", f"must be an integer in 1..512, got {window!r}")
    return Spec(switch_budget_bps=parse_rate(doc.get("switch_budget", "16Mbit"), "switch_budget"), window=window,
                dtype=dtype,
                **{a: tuple(axes[a]) for a in AXES})


def trials(spec: Spec) -> list[tuple]:
    """(topology, workers, size_mb, mode, loss_pct, jobs), one factor at a time around (loss 0, 1 job).

    Per (topology, workers, size): the ring, the switch at every loss with one job, and the switch with
    two concurrent jobs without loss.
    """
    out = []
    for topo in spec.topologies:
        for n in spec.workers:
            if topo == "leaf-spine" and n % 2:
                continue
            for size in spec.sizes_mb:
                out.append((topo, n, size, "ring", 0, 1))
                out += [(topo, n, size, "switch", loss, 1) for loss in spec.loss_pct]
                out += [(topo, n, size, "switch", 0, j) for j in spec.jobs if j > 1]
    return out


def link_rate(spec: Spec, workers: int) -> float:
    """Per-host link rate: the workers together offer the switch its budget (links stay the bottleneck)."""
    return spec.switch_budget_bps / workers


def elements(size_mb: float) -> int:
    return int(size_mb * 1e6) // 4
