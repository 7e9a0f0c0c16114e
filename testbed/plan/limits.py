"""Can this machine build that replica? Refuse up front, naming the limit, instead of failing half-way.

A replica costs, per graph node, a Mininet shell (and for a P4 switch a BMv2 process), per link a veth pair
and a switch port, per emulated delay line a userspace process. The figures below are conservative
estimates of resident memory per object (a bash shell, a veth pair with OVS userspace port state, a BMv2
``simple_switch_fast``, a Python delay line); ``testbed bench build`` measures the real peak on a machine.
Compared with ``MemAvailable`` (so other people's runs count), they keep ``testbed up`` of a spec that
cannot fit from swapping the shared machine to a halt and then leaving thousands of interfaces behind.

Pure: reads /proc/meminfo only (or the numbers given).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.errors import SpecError

#: Estimated resident memory per object, MiB, calibrated on ``testbed bench build fat-tree-k8`` (208 nodes, 384
#: links, HTB only): the replica's peak was 742.6 MB = 708 MiB above the baseline (this process, its node
#: shells and ovs-vswitchd; plain Mininet 733.6 MB; 2026-12-01, load 11 -> 5). Node and link counts grow
#: together in the shipped fabrics, so one measurement fixes their sum, not their split: these keep the
#: fat-tree k=8 estimate at 1.48x the measured peak (1,046 MiB; the founding 4.0/1.5 gave 1,408 MiB, 2x).
MIB_PER_NODE_SHELL = 3.0
MIB_PER_LINK = 1.1
MIB_PER_BMV2 = 60.0
MIB_PER_DELAY_LINE = 40.0

#: Interfaces one replica may create: beyond this, netlink dumps, udev and OVS's userspace datapath (one
#: poll loop over every port) make start-up and teardown take hours on a few cores.
MAX_INTERFACES = 20000

#: Keep this share of the available memory free for the rest of the machine.
HEADROOM = 0.25


@dataclass(frozen=True)
class Estimate:
    nodes: int
    links: int
    interfaces: int
    bmv2: int
    delay_lines: int
    memory_mib: float


def estimate(G, plan=None) -> Estimate:
    """What the replica of ``G`` creates and the memory it needs (pure).

    Delay lines are counted from ``plan``, by default the replica plan on a machine without netem/RED (the
    worst case, and this machine's): each userspace link gets a delay-line node (two more interfaces and a
    process). ``bench build --links htb`` passes its own plan, which has none.
    """
    from testbed.plan.replica import plan_replica

    plan = plan or plan_replica(G)
    bmv2 = sum(1 for s in plan.switches if s.kind == "bmv2")
    delayed = sum(1 for e in plan.links if e.backend == "userspace")
    links = len(plan.links)
    interfaces = 2 * links + 2 * delayed
    memory = (G.number_of_nodes() * MIB_PER_NODE_SHELL + (links + delayed) * MIB_PER_LINK + bmv2 * MIB_PER_BMV2
              + delayed * MIB_PER_DELAY_LINE)
    return Estimate(G.number_of_nodes(), links, interfaces, bmv2, delayed, round(memory, 1))


def mem_available_mib(meminfo: str | None = None) -> float | None:
    """``MemAvailable`` of /proc/meminfo in MiB (None when unknown)."""
    try:
        text = meminfo if meminfo is not None else open("/proc/meminfo").read()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return None


def check_buildable(G, available_mib: float | None = None, plan=None) -> Estimate:
    """Raise :class:`SpecError` (exit 2) when the replica of ``G`` cannot be built here; the estimate otherwise.

    Args:
        available_mib: memory available (default: MemAvailable now).
        plan: the replica plan to size (default: the worst case, :func:`estimate`).
    """
    est = estimate(G, plan)
    name = G.graph.get("name", "spec")
    if est.interfaces > MAX_INTERFACES:
        raise SpecError(name, f"the replica needs {est.interfaces} interfaces ({est.links} links); one machine "
                              f"builds at most {MAX_INTERFACES}: use a smaller spec (fewer pods/hosts) "
                              "and `testbed topo show` for the full size")
    available = mem_available_mib() if available_mib is None else available_mib
    if available is not None and est.memory_mib > available * (1 - HEADROOM):
        raise SpecError(name, f"the replica needs about {est.memory_mib:,.0f} MiB ({est.nodes} nodes, {est.links} "
                              f"links, {est.bmv2} BMv2, {est.delay_lines} delay lines) but only "
                              f"{available:,.0f} MiB are available ({HEADROOM:.0%} kept free); use a smaller "
                              "spec or free memory")
    return est


def refuse_huge(spec) -> None:
    """Refuse (exit 2) a spec whose closed-form size is beyond one machine, before its graph is built (a
    graph of a fat-tree k=1024 alone would not fit)."""
    from testbed.topo.counts import closed_form

    counts = closed_form(spec.kind, spec.params)
    if counts is not None and 2 * counts["links"] > MAX_INTERFACES:
        raise SpecError(spec.name, f"the replica needs at least {2 * counts['links']:,} interfaces "
                                   f"({counts['links']:,} links); one machine builds at most {MAX_INTERFACES:,}: "
                                   "use a smaller spec (`testbed topo show` gives its figures)")
