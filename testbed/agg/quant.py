"""float32 <-> int32 with one exponent per packet (SwitchML's scheme), and its error bound (pure).

Each worker computes, per chunk of :data:`~testbed.agg.protocol.ELEMS` elements, the exponent ``e`` of
its largest magnitude (``max|x| < 2**e``, :func:`chunk_exponent`). The switch takes the maximum over
the workers (``E``), and every worker quantizes that chunk with the same scale::

    k = ceil(log2(n_workers))       S = 30 - k - E        q = rint(x * 2**S)  (int32)

Then ``|q| <= 2**(30 - k)`` and the sum of ``n`` contributions stays below ``2**30``: it never
overflows. Each rounding is off by at most half a unit, so the dequantized sum ``sum(q) * 2**-S``
differs from the exact sum by at most::

    n / 2 * 2**-S  =  n * 2**(E + k - 31)          (error_bound)

i.e. relative to the chunk's largest magnitude (``>= 2**(E-1)``) at most ``n * 2**k * 2**-30``
(6e-8 for 8 workers), plus the float32 rounding of the result (``|sum| * 2**-24``).
"""

from __future__ import annotations

import math

import numpy as np

from testbed.errors import SpecError

#: exponent sent for an all-zero chunk (any value works; the smallest keeps the max meaningful)
MIN_EXPONENT = -126
MAX_EXPONENT = 127


def chunk_exponent(x: np.ndarray) -> int:
    """Smallest ``e`` with ``max|x| < 2**e`` (:data:`MIN_EXPONENT` for zeros).

    Raises:
        SpecError: non-finite values, or magnitudes of 2**127 and above (not representable).
    """
    if x.size == 0:
        return MIN_EXPONENT
    m = float(np.max(np.abs(x)))
    if not math.isfinite(m):
        raise SpecError("tensor", "contains NaN or infinity; in-network aggregation needs finite values")
    if m == 0.0:
        return MIN_EXPONENT
    e = math.frexp(m)[1]          # m = f * 2**e with 0.5 <= f < 1, so m < 2**e
    if e > MAX_EXPONENT:
        raise SpecError("tensor", f"magnitude {m:g} is too large to quantize (limit 2**{MAX_EXPONENT})")
    return max(e, MIN_EXPONENT)


def _shift(exponent: int, n_workers: int) -> int:
    if n_workers < 1:
        raise SpecError("workers", f"must be at least 1, got {n_workers!r}")
    k = math.ceil(math.log2(n_workers)) if n_workers > 1 else 0
    return 30 - k - exponent


def quantize(x: np.ndarray, exponent: int, n_workers: int) -> np.ndarray:
    """int32 contribution of ``x`` at the agreed chunk ``exponent`` (the max over the workers)."""
    scaled = np.rint(np.ldexp(np.asarray(x, dtype=np.float64), _shift(exponent, n_workers)))
    limit = 2.0 ** 31 - 1
    if scaled.size and float(np.max(np.abs(scaled))) > limit:
        raise SpecError("exponent", f"{exponent} is below the chunk's own exponent {chunk_exponent(x)}")
    return scaled.astype(np.int32)


def dequantize(q: np.ndarray, exponent: int, n_workers: int) -> np.ndarray:
    """float32 value of an aggregated int32 vector."""
    return np.ldexp(np.asarray(q, dtype=np.float64), -_shift(exponent, n_workers)).astype(np.float32)


def error_bound(exponent: int, n_workers: int) -> float:
    """Largest quantization error of one summed element (before float32 rounding of the result)."""
    return n_workers / 2 * 2.0 ** -_shift(exponent, n_workers)


def tensor_error_bound(tensors: list[np.ndarray], elems: int) -> np.ndarray:
    """Per-element bound for the float32 allreduce of ``tensors``: quantization + result rounding.

    Used by tests and the scenario to judge a float result (no hard-coded tolerance).
    """
    n = len(tensors)
    size = tensors[0].size
    chunks = -(-size // elems)
    bound = np.empty(size, dtype=np.float64)
    exact = np.sum([t.astype(np.float64) for t in tensors], axis=0)
    for c in range(chunks):
        sl = slice(c * elems, min((c + 1) * elems, size))
        e = max(chunk_exponent(t[sl]) for t in tensors)
        bound[sl] = error_bound(e, n) * (1 + 2.0 ** -20) + np.abs(exact[sl]) * 2.0 ** -23
    return bound
