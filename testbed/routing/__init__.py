"""Routing: the one ECMP brain every southbound driver consumes (pure, no root).

    brain.py     RoutingBrain: equal-cost next hops per switch and prefix, loop-free backups,
                 incremental recomputation on link/switch events -> RouteDiff(add/modify/delete Route)
    verify.py    fake pipeline: walk packets through route tables (loops, black holes, delivery)
    failover.py  failover experiments' analysis (probe records -> per-flow outages) and controller queries

Probe streams come from the one UDP probe, :mod:`testbed.links.probe`.

Drivers: ``controllers/`` (os-ken OpenFlow 1.3) and ``testbed/p4rt/`` (BMv2 tables).
"""
