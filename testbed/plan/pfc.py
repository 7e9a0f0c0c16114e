"""The spec's ``pfc:`` block in the replica plan (pure): the config, every switch port's headroom, and where
PFC does and does not run in a replica.

    Spec.pfc (PfcConfig) --+
    plan links (real rate,  +--> plan_pfc() --> PfcPlan --> plan.json "pfc", `testbed plan` table
      delay, ports)  ------+                        +--> a plan note + the console warning (PFC_NOTE)

The plan's contract is that every spec setting takes effect or is refused, and that what a backend cannot do
is written into the plan. PFC is the second case: its figures are planned here (headroom per switch port
from :func:`testbed.pfc.headroom.port_headrooms`, and whether ``xoff + headroom`` fit the spec's
``buffer``), but a replica's OVS and BMv2 switches neither account ingress bytes nor send or honour PAUSE,
and its link nodes run without ``--pfc``. PFC runs only in the link cores of the N:1 incast fixture
(``testbed/pfc/fanin.py``: scenario ``pfc_incast``, ``testbed bench pfc``). So the plan carries the block with
``applied: false`` and the note, and the run prints the note as a warning (docs/pfc.md, "In a replica").
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from testbed.errors import SpecError
from testbed.pfc.config import PfcConfig
from testbed.pfc.headroom import port_headrooms

#: The plan note (and console warning) of a spec with ``pfc:``.
PFC_NOTE = ("pfc: planned, NOT applied: this replica's OVS/BMv2 switches and link nodes run without PFC "
            "(no ingress accounting, no PAUSE), so lossless priorities are lossy here; PFC runs only in "
            "link cores (scenario pfc_incast, testbed bench pfc). Headroom per switch port: plan.json 'pfc'")

#: Switch kinds with egress buffers (an ``external`` switch, e.g. the optical circuit switch, has none).
BUFFERED_KINDS = ("ovs", "bmv2")


@dataclass(frozen=True)
class PfcPortEntry:
    """One switch port's lossless-priority buffer need (real bytes; dilation keeps bytes)."""

    node: object
    switch: str
    port: int
    peer: object
    headroom_bytes: float
    fits_buffer: bool | None          # xoff + headroom <= the spec's buffer; None without ``buffer:``
    detail: dict                      # port_headrooms' entry: terms (auto) or fixed value and auto_bytes


@dataclass(frozen=True)
class PfcPlan:
    """The spec's PFC block as planned: config, per-port headroom, and ``applied`` (False: see PFC_NOTE)."""

    config: PfcConfig
    ports: tuple                      # PfcPortEntry, by switch then port
    applied: bool = False
    note: str = PFC_NOTE

    @property
    def over_buffer(self) -> tuple:
        """Ports where xoff + headroom exceed the spec's buffer (they cannot stay lossless under incast)."""
        return tuple(p for p in self.ports if p.fits_buffer is False)

    def to_json(self) -> dict:
        return {"applied": self.applied, "note": self.note, "config": self.config.to_dict(),
                "max_headroom_bytes": max((p.headroom_bytes for p in self.ports), default=None),
                "ports_over_buffer": len(self.over_buffer),
                "ports": [{"node": str(p.node), "switch": p.switch, "port": p.port, "peer": str(p.peer),
                           "headroom_bytes": p.headroom_bytes, "fits_buffer": p.fits_buffer, **p.detail}
                          for p in self.ports]}


def plan_pfc(pfc: PfcConfig, links, switches, mtu: int, buffer_bytes: float | None) -> PfcPlan:
    """Headroom of every buffered switch port from the plan's own links (real rate and one-way delay, the
    layout's port numbers).

    Raises:
        SpecError: a link into a switch without a rate (headroom needs it).
    """
    G = nx.Graph(mtu=mtu, buffer_bytes=buffer_bytes)
    for e in links:
        if not e.real.rate_bps:
            raise SpecError(f"links.{e.tier}.rate" if e.tier else f"edges.{e.u}-{e.v}.rate",
                            "PFC headroom needs the link's rate (pfc: is set)")
        G.add_edge(e.u, e.v, rate_bps=e.real.rate_bps, delay_s=e.real.one_way_delay_s,
                   ports={e.u: e.port_u, e.v: e.port_v})
    need = port_headrooms(G, pfc, mtu)
    ports = []
    for s in switches:
        if s.kind not in BUFFERED_KINDS:
            continue
        for p in s.ports:
            doc = dict(need[s.node][p.port])
            fits = doc.pop("fits_buffer", None)
            ports.append(PfcPortEntry(s.node, s.name, p.port, p.peer, float(doc.pop("bytes")), fits, doc))
    return PfcPlan(pfc, tuple(ports))
