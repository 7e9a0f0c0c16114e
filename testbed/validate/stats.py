"""Confidence intervals over repetitions (Student t), without scipy: the t quantile from the regularised
incomplete beta function (Numerical Recipes' continued fraction, Lentz's method) inverted by bisection.

    ci = confidence_interval([9.1, 10.4, 9.8, 10.0, 9.6])   # 95% by default
    ci.mean, ci.low, ci.high, ci.half_width, ci.n

Relative error and RMS helpers for the alignment rows live here too, so every row computes "error" the
same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(prob: float, df: float) -> float:
    """The ``prob`` quantile of Student's t (e.g. 0.975 for a two-sided 95% interval)."""
    if not 0 < prob < 1:
        raise ValueError(f"probability must be in (0, 1), got {prob}")
    if prob < 0.5:
        return -t_quantile(1 - prob, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < prob:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < prob:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class Interval:
    """A mean with its two-sided confidence interval; ``half_width`` is None for fewer than 2 values."""

    mean: float
    half_width: float | None
    n: int
    level: float

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width

    def to_json(self) -> dict:
        return {"mean": self.mean, "low": self.low, "high": self.high, "half_width": self.half_width,
                "n": self.n, "level": self.level}


def confidence_interval(values, level: float = 0.95) -> Interval:
    """Mean and Student-t interval of independent repetitions.

    Raises:
        ValueError: no values, or a value that is not finite.
    """
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("no values")
    if not all(math.isfinite(x) for x in xs):
        raise ValueError(f"values must be finite, got {xs}")
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return Interval(mean, None, n, level)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return Interval(mean, t_quantile(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n), n, level)


def relative_error(value: float, reference: float) -> float:
    """|value - reference| / |reference| (inf when the reference is 0 and the value is not)."""
    if reference == 0:
        return 0.0 if value == 0 else math.inf
    return abs(value - reference) / abs(reference)


def normalised_rms(values, reference, scale: float) -> float:
    """sqrt(mean((v - r)^2)) / scale over paired samples (trajectory error relative to ``scale``)."""
    pairs = list(zip(values, reference, strict=True))
    if not pairs or scale <= 0:
        raise ValueError("need paired samples and a positive scale")
    return math.sqrt(sum((v - r) ** 2 for v, r in pairs) / len(pairs)) / scale
