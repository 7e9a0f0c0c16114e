"""No import cycles between folders (packages under testbed/, each top-level module, controllers/).

Function-level imports count too: a lazy import is still a dependency (emu -> doctor -> emu was one).
Capabilities are probed by doctor and handed down as data instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]


def _unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "controllers":
        return "controllers"
    if parts[0] != "testbed":
        return None
    return "testbed" if len(parts) == 1 else f"testbed.{parts[1]}"


def import_graph() -> nx.DiGraph:
    G = nx.DiGraph()
    for path in sorted((ROOT / "testbed").rglob("*.py")) + sorted((ROOT / "controllers").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        src = _unit(".".join(rel.parts))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                dst = _unit(name)
                if dst and dst != src:
                    G.add_edge(src, dst)
                    G.edges[src, dst].setdefault("files", set()).add(str(rel))
    return G


def test_no_import_cycle_between_folders():
    G = import_graph()
    assert G.has_edge("testbed.emu", "testbed.registry") is False  # sanity: units are folders
    cycles = [c for c in nx.simple_cycles(G)]
    detail = [" -> ".join(c + c[:1]) + "  (" + "; ".join(sorted(G.edges[a, b]["files"])[0]
                                                           for a, b in zip(c, c[1:] + c[:1], strict=True)) + ")"
              for c in cycles]
    assert not cycles, "import cycles between folders:\n" + "\n".join(detail[:10])


def test_the_checker_sees_a_cycle():
    G = import_graph()
    assert G.has_edge("testbed.doctor", "testbed.emu")  # doctor runs its probes through the registry
    G.add_edge("testbed.emu", "testbed.doctor", files={"x"})
    assert any(set(c) == {"testbed.emu", "testbed.doctor"} for c in nx.simple_cycles(G))
