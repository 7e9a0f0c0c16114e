"""Draw a fabric by tiers: hosts at the bottom, each switch tier a row above, campuses side by side.

``layout`` is pure (positions only) and tested; ``draw`` renders with matplotlib's Agg backend so it works
without a display.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx

#: Image formats ``draw`` writes (by the output's suffix).
FORMATS = ("png", "svg", "pdf")

#: Marker colour per role (anything else is grey).
ROLE_COLOURS = {"host": "#4c72b0", "tor": "#55a868", "leaf": "#55a868", "rail": "#55a868",
                "nvswitch": "#8172b2", "router": "#55a868", "switch": "#55a868", "agg": "#c44e52",
                "spine": "#c44e52", "core": "#dd8452", "dci": "#937860"}


def layout(G: nx.Graph) -> dict:
    """``{node: (x, y)}``: y = tier; x spreads each tier evenly inside its campus's band of [0, 1]."""
    campuses = sorted({d.get("campus") or 0 for _, d in G.nodes(data=True)})
    band = 1.0 / len(campuses)
    rows: dict = {}
    for n, d in G.nodes(data=True):  # insertion order keeps pods/groups/servers together
        key = (d["tier"], d.get("campus") or 0) if d["role"] != "dci" else (d["tier"], 0)
        rows.setdefault(key, []).append(n)
    pos = {}
    for (tier, campus), nodes in rows.items():
        is_dci = G.nodes[nodes[0]]["role"] == "dci"
        left, width = (0.0, 1.0) if is_dci else (campuses.index(campus) * band, band)
        for i, n in enumerate(nodes):
            pos[n] = (left + width * (i + 0.5) / len(nodes), float(tier))
    return pos


def draw(G: nx.Graph, out, title: str | None = None) -> Path:
    """Render ``G`` to ``out`` (PNG, SVG or PDF by extension) and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    pos = layout(G)
    n = G.number_of_nodes()
    fig, ax = plt.subplots(figsize=(min(4 + n / 8, 24), 2 + 1.5 * (1 + max(p[1] for p in pos.values()))))
    tiers = sorted({d["tier"] for _, _, d in G.edges(data=True)})
    cmap = plt.get_cmap("tab10")
    for i, tier in enumerate(tiers):
        edges = [(u, v) for u, v, d in G.edges(data=True) if d["tier"] == tier]
        nx.draw_networkx_edges(G, pos, edgelist=edges, ax=ax, width=0.6, alpha=0.6,
                               edge_color=[cmap(i % 10)], label=f"{tier} ({len(edges)})")
    colours = [ROLE_COLOURS.get(d["role"], "#8c8c8c") for _, d in G.nodes(data=True)]
    size = 300 if n <= 60 else max(20, 12000 // n)
    nx.draw_networkx_nodes(G, pos, ax=ax, node_color=colours, node_size=size)
    if n <= 120:
        nx.draw_networkx_labels(G, pos, ax=ax, font_size=7 if n <= 60 else 5, font_color="white")
    ax.set_title(title or f"{G.graph.get('name', 'fabric')} ({G.graph.get('kind', '')}): "
                          f"{sum(1 for _, d in G.nodes(data=True) if d['role'] != 'host')} switches, "
                          f"{sum(1 for _, d in G.nodes(data=True) if d['role'] == 'host')} hosts")
    ax.legend(loc="upper right", fontsize=7, title="link tier")
    ax.set_axis_off()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
