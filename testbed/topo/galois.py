"""Small finite fields GF(p^k), enough for the slim-fly (MMS) construction.

The McKay-Miller-Siran graphs behind slim fly need GF(q) for a prime power q = p^k and a primitive
element of it. For a prime q that is integers mod q; for q = p^k (k > 1) elements are polynomials of
degree < k over GF(p), stored as integers whose base-p digits are the coefficients (digit i = coefficient
of x^i), multiplied modulo the first monic irreducible polynomial of degree k (searched, not tabulated).

    GF(9) = GF(3)[x] / (x^2 + 1):   element 5 = 1*3 + 2 = x + 2

Sizes here are small (q up to a few hundred), so plain Python and exhaustive searches are fine. Pure.
"""

from __future__ import annotations

import itertools


def prime_power(q: int) -> tuple[int, int] | None:
    """``(p, k)`` with ``q = p**k`` and p prime, or None when q is not a prime power."""
    if isinstance(q, bool) or not isinstance(q, int) or q < 2:
        return None
    p = next(d for d in itertools.count(2) if q % d == 0)  # smallest factor: prime
    k, rest = 0, q
    while rest % p == 0:
        rest //= p
        k += 1
    return (p, k) if rest == 1 else None


class GF:
    """The field with q = p^k elements 0..q-1; 0 and 1 are the field's zero and one.

    Raises:
        ValueError: q is not a prime power.
    """

    def __init__(self, q: int):
        pk = prime_power(q)
        if pk is None:
            raise ValueError(f"q must be a prime power (2, 3, 4, 5, 7, 8, 9, 11, ...), got {q!r}")
        self.q, (self.p, self.k) = q, pk
        self.modulus = self._irreducible() if self.k > 1 else None
        self._mul = [[self._slow_mul(a, b) for b in range(q)] for a in range(q)]

    # -- polynomial helpers (coefficient lists, lowest degree first) --------------------------------------
    def _digits(self, a: int) -> list[int]:
        out = []
        for _ in range(self.k):
            a, d = divmod(a, self.p)
            out.append(d)
        return out

    def _number(self, coeffs) -> int:
        return sum(c * self.p ** i for i, c in enumerate(coeffs))

    def _polymulmod(self, a: list[int], b: list[int], modulus: list[int]) -> list[int]:
        p, k = self.p, len(modulus) - 1
        prod = [0] * (len(a) + len(b) - 1)
        for i, x in enumerate(a):
            for j, y in enumerate(b):
                prod[i + j] = (prod[i + j] + x * y) % p
        for deg in range(len(prod) - 1, k - 1, -1):  # reduce by the monic modulus
            c = prod[deg]
            if c:
                for i, m in enumerate(modulus):
                    prod[deg - k + i] = (prod[deg - k + i] - c * m) % p
        return (prod + [0] * k)[:k]

    def _irreducible(self) -> list[int]:
        """First monic degree-k polynomial over GF(p) that is irreducible, by trial division: a polynomial
        of degree k is irreducible iff no monic polynomial of degree 1..k//2 divides it."""
        p, k = self.p, self.k

        def divides(f, g):  # does monic f divide g (both coefficient lists)?
            g = list(g)
            df = len(f) - 1
            for deg in range(len(g) - 1, df - 1, -1):
                c = g[deg]
                if c:
                    for i, m in enumerate(f):
                        g[deg - df + i] = (g[deg - df + i] - c * m) % p
            return not any(g[:df])

        for tail in itertools.product(range(p), repeat=k):
            cand = list(tail) + [1]
            if cand[0] == 0:
                continue
            factors = (list(t) + [1] for d in range(1, k // 2 + 1) for t in itertools.product(range(p), repeat=d))
            if not any(divides(f, cand) for f in factors):
                return cand
        raise AssertionError(f"no irreducible polynomial of degree {k} over GF({p})")  # cannot happen

    def _slow_mul(self, a: int, b: int) -> int:
        if self.k == 1:
            return a * b % self.p
        return self._number(self._polymulmod(self._digits(a), self._digits(b), self.modulus))

    # -- field operations ---------------------------------------------------------------------------------
    def add(self, a: int, b: int) -> int:
        if self.k == 1:
            return (a + b) % self.p
        return self._number((x + y) % self.p for x, y in zip(self._digits(a), self._digits(b), strict=True))

    def neg(self, a: int) -> int:
        if self.k == 1:
            return -a % self.p
        return self._number(-x % self.p for x in self._digits(a))

    def sub(self, a: int, b: int) -> int:
        return self.add(a, self.neg(b))

    def mul(self, a: int, b: int) -> int:
        return self._mul[a][b]

    def power(self, a: int, n: int) -> int:
        out = 1
        for _ in range(n):
            out = self.mul(out, a)
        return out

    def order(self, a: int) -> int:
        """Multiplicative order of a non-zero element."""
        x, n = a, 1
        while x != 1:
            x = self.mul(x, a)
            n += 1
        return n

    def primitive_element(self) -> int:
        """The smallest element generating the multiplicative group (order q - 1)."""
        return next(a for a in range(1, self.q) if self.order(a) == self.q - 1)
