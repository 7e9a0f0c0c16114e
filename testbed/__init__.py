"""scaleout-testbed: scaled-down, running replicas of AI-cluster fabrics.

Layout by privilege (see docs/architecture.md):

    pure (no root)                         root glue (thin)
    --------------                         ----------------
    topo/     fabric models, spec schema   emu/   Mininet/OVS/netns, registry, cleanup
    routing/  ECMP brain                   p4rt/  BMv2 switches, Thrift programming
    links/    link + queue/RED model       controllers/ (os-ken apps, separate process)
    roce/     RoCEv2 Scapy layers
    rdma/     soft-RDMA endpoint, DCQCN
    agg/      in-network aggregation
"""

__version__ = "0.1.0"
