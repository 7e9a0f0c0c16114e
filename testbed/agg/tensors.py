"""Deterministic test tensors: every process regenerates its own input, the checker all of them (pure).

Workers run in separate hosts (network namespaces), so rather than shipping tensors around each one
draws its input from ``(seed, job, rank)``; the runner recomputes the exact numpy sum to judge results.
int32 values are small enough that the sum of 32 workers never wraps; float32 values span several
orders of magnitude so that per-packet exponents matter.
"""

from __future__ import annotations

import hashlib

import numpy as np

from testbed.errors import SpecError

DTYPES = ("int32", "float32")


def make_tensor(seed: int, job: int, rank: int, n_elements: int, dtype: str) -> np.ndarray:
    if dtype not in DTYPES:
        raise SpecError("dtype", f"must be one of {', '.join(DTYPES)}, got {dtype!r}")
    rng = np.random.default_rng([seed, job, rank])
    if dtype == "int32":
        return rng.integers(-(2 ** 26), 2 ** 26, size=n_elements, dtype=np.int32)
    scale = 10.0 ** rng.uniform(-3, 3, size=max(1, n_elements // 256 + 1)).repeat(256)[:n_elements]
    return (rng.standard_normal(n_elements) * scale).astype(np.float32)


def expected_sum(seed: int, job: int, n_workers: int, n_elements: int, dtype: str) -> np.ndarray:
    """What an allreduce must return: exact int32 sum, or float64 sum for float32 inputs."""
    acc = np.zeros(n_elements, dtype=np.int64 if dtype == "int32" else np.float64)
    for rank in range(n_workers):
        acc += make_tensor(seed, job, rank, n_elements, dtype)
    return acc.astype(np.int32) if dtype == "int32" else acc


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]
