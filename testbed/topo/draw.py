"""Draw a fabric in a layout that shows its structure.

* Tiered fabrics (fat-tree, spine-leaf, rails, cross-campus): hosts at the bottom, each switch tier a row
  above, campuses side by side.
* Grids (torus, full-mesh: switches carry ``coord``): switches on their grid, a 3-D/4-D grid as planes side
  by side, hosts in a small ring around their switch; links that skip over switches (torus wrap-around,
  full-mesh row/column links) are drawn as arcs so they do not hide behind the neighbours' links.
* Groups (dragonfly, slim fly: routers carry ``group``): groups on a circle, each group's routers on a small
  circle of their own, hosts just outside their router; global links cross the big circle.

``layout`` (positions) and ``curved`` (which links are arcs) are pure and tested; ``draw`` renders with
matplotlib's Agg backend (no display needed), the legend outside the plot so it covers no node.
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


def _switches(G: nx.Graph) -> list:
    return [n for n, d in G.nodes(data=True) if d["role"] != "host"]


def style(G: nx.Graph) -> str:
    """"grid" (switches have coordinates), "groups" (routers have groups) or "tiers"."""
    sw = _switches(G)
    if sw and all("coord" in G.nodes[n] for n in sw):
        return "grid"
    if sw and all(G.nodes[n].get("group") is not None for n in sw) and G.graph.get("kind") != "cross-campus":
        return "groups"
    return "tiers"


def _host_ring(G: nx.Graph, pos: dict, radius: float, outward: dict | None = None, spread: float = 0.6) -> None:
    """Place each host near its (first) switch: on a small ring, or along ``outward[switch]`` (a unit
    direction) when given, ``spread * radius`` apart side by side."""
    import math

    by_switch: dict = {}
    for n, d in G.nodes(data=True):
        if d["role"] == "host":
            sw = next((m for m in G.neighbors(n) if m in pos), None)
            by_switch.setdefault(sw, []).append(n)
    for sw, hs in by_switch.items():
        cx, cy = pos.get(sw, (0.0, 0.0))
        for i, h in enumerate(hs):
            if outward is not None and sw in outward:
                ox, oy = outward[sw]
                side = (i - (len(hs) - 1) / 2) * spread * radius
                pos[h] = (cx + ox * radius * 1.8 - oy * side, cy + oy * radius * 1.8 + ox * side)
            else:  # fanned around the up-right diagonal, which no grid link uses
                a = math.pi / 4 + (i - (len(hs) - 1) / 2) * min(0.45, 1.4 / len(hs))
                pos[h] = (cx + radius * math.cos(a), cy + radius * math.sin(a))


def _grid_layout(G: nx.Graph) -> dict:
    """Switches at their coordinates (dims 3+ laid out as planes side by side); hosts around them."""
    sw = _switches(G)
    dims = [max(G.nodes[n]["coord"][i] for n in sw) + 1 for i in range(len(G.nodes[sw[0]]["coord"]))]
    pos = {}
    for n in sw:
        c = tuple(G.nodes[n]["coord"]) + (0, 0, 0)
        x, y = c[0], c[1] if len(dims) > 1 else 0
        # Dimension 3 as interleaved planes shifted down-right (an oblique projection: links between
        # planes are short diagonals that cross no row or column); dimension 4 as copies side by side.
        plane_x = c[2] * 0.45 / max(1, dims[2] - 1) * 1.6 if len(dims) > 2 else 0
        plane_y = c[2] * 0.35 / max(1, dims[2] - 1) * 1.6 if len(dims) > 2 else 0
        block_x = c[3] * (dims[0] + 1.5) if len(dims) > 3 else 0
        pos[n] = (float(x + plane_x + block_x), float(-(y + plane_y)))
    _host_ring(G, pos, 0.32)
    return pos


def _group_layout(G: nx.Graph) -> dict:
    """Groups on a circle, routers on a small circle per group, hosts just outside their router."""
    import math

    sw = _switches(G)
    groups: dict = {}
    for n in sw:
        groups.setdefault(G.nodes[n]["group"], []).append(n)
    order = sorted(groups, key=str)
    big = max(1.0, len(order) / math.pi)  # keeps neighbouring groups apart
    small = 0.35
    pos, outward = {}, {}
    for gi, g in enumerate(order):
        ga = 2 * math.pi * gi / len(order)
        gx, gy = big * math.cos(ga), big * math.sin(ga)
        members = groups[g]
        for ri, r in enumerate(members):
            a = ga + 2 * math.pi * ri / len(members)
            pos[r] = (gx + small * math.cos(a), gy + small * math.sin(a))
            # Away from the group's own centre, not the big circle's: a router on the inner side of its
            # group would otherwise put its hosts inside the group, on the local links.
            outward[r] = (math.cos(a), math.sin(a))
    _host_ring(G, pos, 0.14, outward, spread=1.1)
    return pos


def curved(G: nx.Graph, pos: dict) -> set:
    """Edges drawn as arcs: grid links between switches that are not grid neighbours, and links between
    the copies of a 4-D grid (straight, either would run through the switches between its ends)."""
    if style(G) != "grid":
        return set()
    out = set()
    for u, v in G.edges():
        if G.nodes[u]["role"] == "host" or G.nodes[v]["role"] == "host":
            continue
        cu, cv = G.nodes[u]["coord"], G.nodes[v]["coord"]
        diff = [i for i, (a, b) in enumerate(zip(cu, cv, strict=True)) if a != b]
        if sum(abs(cu[i] - cv[i]) for i in diff) > 1 or any(i >= 3 for i in diff):
            out.add((u, v))
    return out


def layout(G: nx.Graph) -> dict:
    """``{node: (x, y)}`` in the layout of :func:`style` (see the module docstring)."""
    kind = style(G)
    if kind == "grid":
        return _grid_layout(G)
    if kind == "groups":
        return _group_layout(G)
    return _tier_layout(G)


def _tier_layout(G: nx.Graph) -> dict:
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
    xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
    if style(G) == "tiers":
        size_in = (min(4 + n / 8, 24), 2 + 1.5 * (1 + max(ys)))
    else:  # keep the aspect of the grid or circle
        w, h = max(xs) - min(xs) + 1, max(ys) - min(ys) + 1
        scale = min(14 / w, 12 / h, 1.6)
        size_in = (max(5, w * scale) + 2.5, max(4, h * scale) + 1)
    fig, ax = plt.subplots(figsize=size_in)
    tiers = sorted({d["tier"] for _, _, d in G.edges(data=True)})
    arcs = curved(G, pos)
    cmap = plt.get_cmap("tab10")
    for i, tier in enumerate(tiers):
        edges = [(u, v) for u, v, d in G.edges(data=True) if d["tier"] == tier]
        straight = [e for e in edges if e not in arcs]
        bent = [e for e in edges if e in arcs]
        colour = [cmap(i % 10)]
        nx.draw_networkx_edges(G, pos, edgelist=straight, ax=ax, width=0.6, alpha=0.6, edge_color=colour,
                               label=f"{tier} ({len(edges)})")
        by_rad: dict = {}
        for u, v in bent:  # long chords bend less, so arcs stay near the grid
            chord = ((pos[u][0] - pos[v][0]) ** 2 + (pos[u][1] - pos[v][1]) ** 2) ** 0.5
            by_rad.setdefault(round(0.25 / max(1.0, chord / 2), 3), []).append((u, v))
        for j, (rad, group) in enumerate(sorted(by_rad.items())):
            arcs_drawn = nx.draw_networkx_edges(G, pos, edgelist=group, ax=ax, width=0.6, alpha=0.6,
                                                edge_color=colour, arrows=True, arrowstyle="-",
                                                connectionstyle=f"arc3,rad={rad}",
                                                label=None if straight or j else f"{tier} ({len(edges)})")
            for patch in arcs_drawn or []:
                patch.set_clip_on(False)
    colours = [ROLE_COLOURS.get(d["role"], "#8c8c8c") for _, d in G.nodes(data=True)]
    size = 300 if n <= 60 else max(20, 12000 // n)
    nx.draw_networkx_nodes(G, pos, ax=ax, node_color=colours, node_size=size)
    if n <= 120:
        nx.draw_networkx_labels(G, pos, ax=ax, font_size=7 if n <= 60 else 5, font_color="white")
    ax.set_title(title or f"{G.graph.get('name', 'fabric')} ({G.graph.get('kind', '')}): "
                          f"{sum(1 for _, d in G.nodes(data=True) if d['role'] != 'host')} switches, "
                          f"{sum(1 for _, d in G.nodes(data=True) if d['role'] == 'host')} hosts")
    # Outside the axes, right of the plot: a legend never covers a node.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7, title="link tier")
    ax.set_axis_off()
    if style(G) != "tiers":
        ax.set_aspect("equal")
        ax.margins(0.12)  # room for the arcs outside the outermost rows
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")  # no empty band around a circle or grid
    plt.close(fig)
    return out
