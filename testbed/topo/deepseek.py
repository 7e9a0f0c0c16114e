"""Validation row: DeepSeek's published cost per endpoint, reproduced from our own counts (pure).

Zhao et al., "Insights into DeepSeek-V3: Scaling Challenges and Reflections on Hardware for AI
Architectures" (ISCA'25, arXiv 2505.09343), compare network topologies of 64-port 400G switches by
endpoints, switches, links and cost, with cost estimated after the Slim Fly paper's method (a price per
switch and a price per inter-switch link; endpoint links are not counted). Their rows::

    topology   endpoints  switches   links     cost      per endpoint
    FT2          2,048        96      2,048     $9M       $4.39k
    MPFT        16,384       768     16,384    $72M       $4.39k
    FT3         65,536     5,120    131,072   $491M       $7.5k
    SF          32,928     1,568     32,928   $146M       $4.4k
    DF         261,632    16,352    384,272  $1,522M      $5.8k

The paper publishes no price list. Two unknowns (switch price, link price) follow from two rows; we take
them from FT2 and FT3 (per endpoint: S*96/2048 + L = 4390 and S*5120/65536 + 2L = 7500, so
S = $81,920 per 64-port switch = $1,280 per port, L = $550 per link) and then *predict* the other rows
from counts this module derives itself (formulas, not their table):

    FT2   2-tier Clos of 64-port switches (testbed.topo.sizing.clos_counts), 2,048 endpoints
    MPFT  8 planes of FT2
    FT3   3-tier k = 64 fat-tree
    SF    slim fly q = 28 (not a prime power: DeepSeek sized it by formula), k' = 42, p = 21
    DF    dragonfly a = 32 routers/group, p = 16, h = 16, g = 511 groups (their counts imply g = 511 and
          every global port used: g*a*h/2 global links)

So FT2/FT3 agree by construction (calibration), MPFT checks the multi-plane counting, SF and DF are
genuine out-of-sample checks of both the counts and the two-term price model. Provenance of the table
(a secondary summary for MPFT/FT3/DF; FT2, SF and the links column as recalled): docs/cost.md.
"""

from __future__ import annotations

from testbed.topo.sizing import clos_counts

RADIX = 64

#: DeepSeek's Table: name -> (endpoints, switches, links, cost USD, cost per endpoint USD).
PUBLISHED = {
    "FT2": (2_048, 96, 2_048, 9e6, 4_390.0),
    "MPFT": (16_384, 768, 16_384, 72e6, 4_390.0),
    "FT3": (65_536, 5_120, 131_072, 491e6, 7_500.0),
    "SF": (32_928, 1_568, 32_928, 146e6, 4_400.0),
    "DF": (261_632, 16_352, 384_272, 1_522e6, 5_800.0),
}
CALIBRATION = ("FT2", "FT3")


def counts() -> dict:
    """name -> (endpoints, switches, inter-switch links), derived here by formula."""
    out = {}
    per, links = clos_counts(2_048, RADIX, 2)
    out["FT2"] = (2_048, sum(per), links)
    out["MPFT"] = (8 * 2_048, 8 * sum(per), 8 * links)
    per, links = clos_counts(RADIX ** 3 // 4, RADIX, 3)
    out["FT3"] = (RADIX ** 3 // 4, sum(per), 2 * links)
    q = 28
    k_net = (3 * q) // 2  # q = 4w + 0 -> k' = 3q/2 (slim_fly_degree refuses q = 28: not a prime power)
    p = k_net // 2
    routers = 2 * q * q
    out["SF"] = (routers * p, routers, routers * k_net // 2)
    a, p, h, g = 32, 16, 16, 511
    out["DF"] = (a * p * g, a * g, g * a * (a - 1) // 2 + g * a * h // 2)
    return out


def calibrate(published: dict = PUBLISHED) -> tuple[float, float]:
    """(switch USD, link USD) solving the two calibration rows' per-endpoint costs exactly."""
    (e1, s1, l1, _, c1), (e2, s2, l2, _, c2) = (published[n] for n in CALIBRATION)
    a1, b1, a2, b2 = s1 / e1, l1 / e1, s2 / e2, l2 / e2
    det = a1 * b2 - a2 * b1
    return (c1 * b2 - c2 * b1) / det, (a1 * c2 - a2 * c1) / det


def table(switch_usd: float | None = None, link_usd: float | None = None) -> list[dict]:
    """Ours vs theirs per topology: counts, per-endpoint cost, relative error, role of the row."""
    if switch_usd is None or link_usd is None:
        switch_usd, link_usd = calibrate()
    rows = []
    for name, (e, s, n) in counts().items():
        pe, ps, pl, _, pcost = PUBLISHED[name]
        ours = (s * switch_usd + n * link_usd) / e
        rows.append({"topology": name, "endpoints": e, "switches": s, "links": n,
                     "counts_match": (e, s, n) == (pe, ps, pl),
                     "per_endpoint_usd": round(ours, 1), "published_usd": pcost,
                     "error": round(ours / pcost - 1, 4),
                     "role": "calibration" if name in CALIBRATION else "prediction"})
    return rows


def assumptions() -> dict:
    s, link = calibrate()
    return {"switch_usd": round(s, 2), "port_usd": round(s / RADIX, 2), "link_usd": round(link, 2),
            "radix": RADIX, "speed_g": 400, "endpoint_links_priced": False}


def prices():
    """DeepSeek's assumptions as a :class:`~testbed.topo.cost.Prices` for :mod:`testbed.topo.sizing`:
    64-port 400G fixed boxes at the calibrated port price, every inter-switch link the calibrated flat
    price whatever its medium (half per end, no fibre), endpoint links not priced."""
    from testbed.topo.cost import COST_TABLE, Prices

    switch_usd, link_usd = calibrate()
    over = {"port_fixed_400g": switch_usd / RADIX, "fixed_capacity_gbps": RADIX * 400.0, "host_links": 0.0,
            "fibre_per_m": 0.0}
    for key in COST_TABLE:
        if key.endswith("_400g") and not key.startswith("port_"):
            over[key] = link_usd if key.split("_")[0] in ("dac", "acc", "aec") else link_usd / 2
    return Prices.from_table(over)
