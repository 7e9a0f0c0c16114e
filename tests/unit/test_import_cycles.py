"""No import cycles between folders (packages under testbed/, each top-level module, controllers/).

Function-level imports count too: a lazy import is still a dependency (emu -> doctor -> emu was one).
Capabilities are probed by doctor and handed down as data instead.

A *contract module* -- one that imports nothing of the project, such as ``testbed/topo/graph.py`` (the
graph contract every layer shares) -- is its own unit: importing it loads nothing else of its folder
(the package ``__init__`` files import nothing), so it cannot close a loop.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [n for n in names if n.split(".")[0] in ("testbed", "controllers")]


def _files() -> dict:
    paths = sorted((ROOT / "testbed").rglob("*.py")) + sorted((ROOT / "controllers").rglob("*.py"))
    return {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in paths}


def _unit(module: str, contracts: set) -> str | None:
    if module in contracts:
        return module
    parts = module.split(".")
    if parts[0] == "controllers":
        return "controllers"
    if parts[0] != "testbed":
        return None
    return "testbed" if len(parts) == 1 else f"testbed.{parts[1]}"


def import_graph() -> nx.DiGraph:
    files = _files()
    imports = {mod: _imports(path) for mod, path in files.items()}
    contracts = {mod for mod, names in imports.items()
                 if not names and not mod.endswith("__init__") and mod.count(".") >= 2}
    G = nx.DiGraph()
    for mod, names in imports.items():
        src = _unit(mod.removesuffix(".__init__"), contracts)
        for name in names:
            dst = _unit(name, contracts)
            if dst and dst != src:
                G.add_edge(src, dst)
                G.edges[src, dst].setdefault("files", set()).add(mod)
    return G


def test_no_import_cycle_between_folders():
    G = import_graph()
    assert "testbed.emu" in G and "testbed.topo.graph" in G  # folders, and contract modules apart
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
