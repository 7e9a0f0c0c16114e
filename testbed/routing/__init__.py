"""Routing: the one ECMP brain every southbound driver consumes (pure, no root).

    brain.py     RoutingBrain: equal-cost next hops per switch and prefix, loop-free backups,
                 incremental recomputation on link/switch events -> RouteDiff(add/modify/delete Route)
    verify.py    fake pipeline: walk packets through route tables (loops, black holes, delivery)
    udpprobe.py  constant-rate UDP with sequence numbers, for failover outage measurements

Drivers: ``controllers/`` (os-ken OpenFlow 1.3) and ``testbed/p4rt/`` (BMv2 tables).
"""
