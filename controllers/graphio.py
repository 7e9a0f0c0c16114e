"""The fabric graph as a file: node-link JSON handed to the controller process.

Only JSON-able attributes travel (graph-level objects such as the parsed spec or a Dilation stay home);
``ports`` keeps its ``{node: port}`` form because node names are strings.
"""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx

from testbed.errors import SpecError


def _plain(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def to_json(G: nx.Graph) -> dict:
    """Node-link document of ``G`` with only JSON-able attributes."""
    H = nx.Graph()
    H.graph.update({k: v for k, v in G.graph.items() if _plain(v)})
    for n, d in G.nodes(data=True):
        H.add_node(n, **{k: v for k, v in d.items() if _plain(v)})
    for a, b, d in G.edges(data=True):
        H.add_edge(a, b, **{k: v for k, v in d.items() if _plain(v)})
    return nx.node_link_data(H)


def dump_graph(G: nx.Graph, path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(to_json(G), indent=1))
    return path


def load_graph(path) -> nx.Graph:
    """Read a node-link JSON graph; raises SpecError naming the file when it is not one."""
    try:
        doc = json.loads(Path(path).read_text())
        return nx.node_link_graph(doc)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecError(str(path), f"not a node-link graph file: {exc}") from None
