"""Interface counters of a running replica (root glue for :mod:`testbed.links.hops`; in validate, not emu,
so that emu does not import links, which imports emu).

    topology(rep)   -> elements + veth pairs, keyed "<namespace>/<ifname>" (hosts have their own namespace;
                       switches and link nodes live in the root one)
    snapshot(rep)   -> /proc/net/dev of every namespace of the run, parsed, under the same keys
"""

from __future__ import annotations

from pathlib import Path

from testbed.links.hops import Element, parse_proc_net_dev

ROOT = "root"


def _ns(rep, node) -> str:
    return node.name if node in rep.net.hosts else ROOT


def topology(rep) -> tuple[list[Element], list[tuple]]:
    """The run's elements and wires, from Mininet's nodes and links."""
    from testbed.links.node import DelayLineNode

    elements = []
    for node in rep.net.hosts + rep.net.switches:
        kind = "host" if node in rep.net.hosts else "link" if isinstance(node, DelayLineNode) else "switch"
        intfs = tuple(f"{_ns(rep, node)}/{i}" for i in node.intfNames() if i != "lo")
        elements.append(Element(node.name, kind, intfs))
    wires = [(f"{_ns(rep, lk.intf1.node)}/{lk.intf1.name}", f"{_ns(rep, lk.intf2.node)}/{lk.intf2.name}")
             for lk in rep.net.links]
    return elements, wires


def snapshot(rep) -> dict:
    """Every interface's packet and drop counters, in the root namespace and in each host's."""
    out = {f"{ROOT}/{k}": v for k, v in parse_proc_net_dev(Path("/proc/net/dev").read_text()).items()}
    for h in rep.net.hosts:
        out.update({f"{h.name}/{k}": v for k, v in parse_proc_net_dev(h.cmd("cat /proc/net/dev")).items()})
    return out
