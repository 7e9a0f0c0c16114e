"""Control plane of ``aggregation.p4`` (pure): a fabric graph + jobs -> table entries and multicast groups.

    AggPlan(G, aggregator="s1", agg_ip="10.255.0.1", jobs=[AggJob(1, ["h1", "h2"], window=64)])
      .switch_program("s1") -> SwitchProgram(entries=[TableEntry...], mc_groups={job: [ports]})

Per switch:
  * ``ipv4_route``: a /32 per host, and the aggregator address towards the aggregator (shortest paths).
  * on the aggregator: ``agg_address`` (its address), ``job_table`` (disjoint slot partitions, in job
    order), one multicast group per job to the ports leading to the job's workers, ``port_host`` for
    ports that face a host (the replica leaving there is addressed to that host).
  * on other switches on the way (leaves): ``result_fanout`` (job, aggregator address) -> group of the
    ports towards the job's workers below (a shadow reply, addressed to one worker, is just routed),
    plus ``port_host``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from testbed.agg.model import JobEntry, check_partitions
from testbed.agg.protocol import POOL_SLOTS
from testbed.errors import SpecError
from testbed.p4rt.entries import TableEntry
from testbed.topo.graph import hosts, is_host, port

ING = "AggIngress"
SLOTS = "AggIngress.slots"
STATS_COUNTER = f"{SLOTS}.stats"


@dataclass(frozen=True)
class AggJob:
    """One training job: its workers (host nodes, rank = position) and how many slots it asks for.

    ``switch_slots`` below ``window`` leaves the rest of the window to the parameter server ``ps``.
    """

    job: int
    workers: tuple
    window: int
    switch_slots: int | None = None
    ps: object = None

    def __post_init__(self):
        if not 1 <= len(self.workers) <= 32:
            raise SpecError(f"jobs.{self.job}.workers", f"need 1..32 workers, got {len(self.workers)}")
        if not 1 <= self.window < 2 ** 15:
            raise SpecError(f"jobs.{self.job}.window", f"must be in 1..32767, got {self.window!r}")
        slots = self.slots
        if not 0 <= slots <= self.window:
            raise SpecError(f"jobs.{self.job}.switch_slots", f"must be in 0..window ({self.window}), got {slots}")
        if slots < self.window and self.ps is None:
            raise SpecError(f"jobs.{self.job}.ps", "needed when switch_slots < window (the PS completes the rest)")

    @property
    def slots(self) -> int:
        return self.window if self.switch_slots is None else self.switch_slots


@dataclass
class SwitchProgram:
    entries: list = field(default_factory=list)
    mc_groups: dict = field(default_factory=dict)     # group id -> sorted port list


class AggPlan:
    def __init__(self, G: nx.Graph, aggregator, agg_ip: str, jobs: list[AggJob], pool_slots: int = POOL_SLOTS):
        if aggregator not in G or is_host(G, aggregator):
            raise SpecError("aggregator", f"{aggregator!r} is not a switch of the fabric")
        for j in jobs:
            for w in list(j.workers) + ([j.ps] if j.ps is not None else []):
                if w not in G or not is_host(G, w):
                    raise SpecError(f"jobs.{j.job}.workers", f"{w!r} is not a host of the fabric")
        if len({j.job for j in jobs}) != len(jobs):
            raise SpecError("jobs", "job ids must be unique")
        self.G, self.aggregator, self.agg_ip, self.jobs = G, aggregator, agg_ip, list(jobs)
        base, self.entries_by_job = 0, {}
        for j in self.jobs:
            self.entries_by_job[j.job] = JobEntry(
                job=j.job, base=base, size=j.slots, limit=j.window, members=(1 << len(j.workers)) - 1,
                mgrp=j.job, ps_ip=G.nodes[j.ps]["ip"] if j.ps is not None else "0.0.0.0")
            base += j.slots
        check_partitions(list(self.entries_by_job.values()), pool_slots)

    def _next_port(self, sw, dst) -> int:
        path = nx.shortest_path(self.G, sw, dst)
        return port(self.G, sw, path[1])

    def _fanout_ports(self, sw, job: AggJob) -> list[int]:
        """Ports of ``sw`` leading down to the job's workers (away from the aggregator)."""
        ports = set()
        for w in job.workers:
            path = nx.shortest_path(self.G, self.aggregator, w)
            if sw in path:
                ports.add(port(self.G, sw, path[path.index(sw) + 1]))
        return sorted(ports)

    def switch_program(self, sw) -> SwitchProgram:
        G, prog = self.G, SwitchProgram()
        for h in hosts(G):
            prog.entries.append(TableEntry(f"{ING}.ipv4_route", "route", (f"{G.nodes[h]['ip']}/32",),
                                           (str(self._next_port(sw, h)), G.nodes[h]["mac"])))
        for nbr in G.neighbors(sw):
            if is_host(G, nbr):
                prog.entries.append(TableEntry("AggEgress.port_host", "to_host", (str(port(G, sw, nbr)),),
                                               (G.nodes[nbr]["mac"], G.nodes[nbr]["ip"])))
        if sw == self.aggregator:
            prog.entries.append(TableEntry(f"{ING}.agg_address", "aggregate_here", (self.agg_ip,)))
            for j in self.jobs:
                e = self.entries_by_job[j.job]
                prog.entries.append(TableEntry(f"{SLOTS}.job_table", "set_job", (str(j.job),), (
                    str(e.base), str(e.size), str(e.limit), str(e.members), str(len(j.workers)), str(e.mgrp),
                    e.ps_ip)))
                prog.mc_groups[e.mgrp] = self._fanout_ports(sw, j)
        else:
            prog.entries.append(TableEntry(f"{ING}.ipv4_route", "route", (f"{self.agg_ip}/32",),
                                           (str(self._next_port(sw, self.aggregator)), "00:00:00:00:00:00")))
            for j in self.jobs:
                ports = self._fanout_ports(sw, j)
                if ports:
                    prog.entries.append(TableEntry(f"{ING}.result_fanout", "fan_out", (str(j.job), self.agg_ip),
                                                   (str(j.job),)))
                    prog.mc_groups[j.job] = ports
        return prog

    def switches(self) -> list:
        """Every switch gets a program: host routes serve the ring baseline and the PS as well."""
        return [n for n in self.G.nodes if not is_host(self.G, n)]
