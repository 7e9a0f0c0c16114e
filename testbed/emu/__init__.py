"""Emulation core (root glue): running replicas of a fabric plan, and a record of what they create.

Public API (stable; others build on it)::

    from testbed.emu import Replica, RunRegistry
    from testbed.plan import Overrides, plan_replica            # pure: what to build
    from testbed.doctor import plan_capabilities                # probed once, as data

    plan = plan_replica(G, plan_capabilities(), Overrides())
    with Replica(plan, controller=None,                         # or ("127.0.0.1", 6653)
                 out_dir=res.dir, name="demo",                  # plan.json + replica.json written there
                 switch_factory=None,     # bmv2_switch_factory(...) when the plan has BMv2 switches
                 link_node_class=None,    # DelayLineNode when the plan has userspace links
                 run=None) as rep:
        rep.net                  # mininet.net.Mininet; hosts/switches named as graph nodes (or an alias)
        rep.host("h1"), rep.switch("s1"), rep.node(n)   # Mininet nodes by graph node
        rep.ip("h1"), rep.mac("h1")                      # host addresses (from the plan)
        rep.intf_name("s1", "h1")                        # s1's interface facing h1, e.g. "s1-eth3"
        rep.link_node("s1", "s2")                        # the inserted link node (delay line) of an edge
        rep.popen("h1", argv, **popen_kw)                # start + record a process on a node
        rep.run                                          # this run's RunRegistry
        rep.plan, rep.layout                             # the plan executed; its names/ports/addresses
        rep.apply_queues(other_plan)                     # BMv2 queues of another plan of the same fabric

    Link nodes: named dl<i>; port 1 faces u, port 2 faces v; u and v keep their graph port numbers.
    Every node created gets ``node.run`` (the RunRegistry): node classes that start processes record them
    with ``self.run.record_process(pid_or_popen)``.

    with RunRegistry("p4-test") as run:                  # without Mininet (takes the machine-wide lock)
        run.add_netns("p4t-h1")
        run.add_veth("p4t-h1-0", "p4t-s1-1", ns_a="p4t-h1")   # recorded, created, offloads off
        proc = run.spawn(argv, netns=None, log=path)     # own session, recorded with its start time
        run.record_link(name) / record_bridge(name) / record_netns(name) / record_process(pid)
    RunRegistry(name, exclusive=False): no lock (for probes with unique names).

Leaving the block in any way (exception, SIGINT, SIGTERM) removes everything recorded; after SIGKILL,
``testbed clean`` removes exactly the recorded objects of dead runs.  TESTBED_LOCK_WAIT=<s> waits for the
lock (waiters are served in arrival order) instead of failing with "another testbed run is active".
"""

from testbed.emu.registry import LockBusyError, RunRegistry, clean_runs, load_runs
from testbed.emu.replica import Replica

__all__ = ["Replica", "RunRegistry", "LockBusyError", "clean_runs", "load_runs"]
