"""BMv2 for the testbed: compile P4, run ``simple_switch``, program it over Thrift.

Public API (stable; the aggregation switch reuses it)::

    from testbed.p4rt.compile import compile_p4             # compile_p4("p4/x.p4") -> Path of cached JSON
    from testbed.p4rt.switch import Bmv2Config, Bmv2Process  # one simple_switch process
    from testbed.p4rt.client import SwitchClient            # Thrift: tables, counters, registers, queues
    from testbed.p4rt.entries import TableEntry             # pure entries; render() = CLI line
    from testbed.p4rt.mininet_switch import Bmv2Switch, plan_switch_factory   # for Replica
    from testbed.plan.alloc import Allocator                 # thrift ports + device ids, one per run

    json_path = compile_p4("p4/aggregation.p4")           # cache: build/p4/<stem>-<hash>.json
    alloc = Allocator()
    with RunRegistry("agg-test") as run:                   # records veths/processes, machine lock
        cfg = Bmv2Config(name="s1", json_path=json_path, ports={1: "veth1", 2: "veth2"},
                         log_dir=out_dir, pcap_dir=None, log=False, **alloc.switch("s1"))
        sw = Bmv2Process(cfg).start(run)                   # simple_switch_fast unless log=True
        sw.wait_ready()                                    # polls Thrift; a crash raises with the log path
        with sw.client() as c:
            c.table_add("t", "a", ["10.0.0.0/8"], ["1"])  # CLI syntax; returns the entry handle
            c.table_set_default("t", "drop")
            c.apply([TableEntry("t", "a", ("10.0.0.1/32",), ("2",))])
            c.counter_read("cnt", 0).packets; c.register_read("r", 3); c.register_write("r", 3, 7)
            c.mirroring_add(session=5, port=2); c.mc_group(group=1, ports=[1, 2, 3])
            c.set_queue_depth(64, port=2); c.set_queue_rate(1000, port=2)   # pps

In Mininet (``Replica(plan, switch_factory=...)``; Thrift ports, device ids, queues come from the plan)::

    factory = plan_switch_factory(plan, log_dir=out_dir)   # compiles the programs the plan's switches run
    # factory(switch_entry) -> (Bmv2Switch, params); Replica sets each port's queue depth/rate from the plan
    rep.switch("s1").client()  # SwitchClient of that switch

Errors: :class:`testbed.p4rt.compile.P4CompileError` (compiler messages), :class:`~testbed.errors.EmulationError`
(switch died / did not start; names the log), :class:`testbed.p4rt.client.P4RuntimeError` (a Thrift call
failed; names switch and table), :class:`~testbed.errors.CapabilityError` (BMv2 absent).

fabric.p4 specifics (ECMP, ECN, fast CNP) are in :mod:`testbed.p4rt.entries` and ``docs/p4.md``.

Failover (the routing brain's southbound driver for BMv2; docs/sdn.md "P4 fabrics")::

    from testbed.p4rt.live import p4_failover               # with p4_failover(rep, brain) as fo: fo.fabric.events
    from testbed.p4rt.failover import P4Fabric              # brain -> incremental, pipelined table writes
    from testbed.p4rt.incremental import diff_ops           # pure: RouteDiff -> TableOps per switch
"""
