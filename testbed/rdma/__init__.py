"""Soft RDMA: a userspace RoCEv2 endpoint over UDP sockets, with DCQCN.

::

    verbs.py   PD, MR (addr, rkey), CQ, work completions            pure
    qp.py      RC queue pair engine: segmentation, ACK/NAK,          pure (takes ``now``)
               go-back-N, timeouts, placement, NP/RP hooks
    dcqcn.py   DCQCN reaction/notification point math, time series  pure
    dcqcn_sim.py  fluid bottleneck model for fairness checks          pure
    wire.py    BTH/RETH/AETH bytes, ICRC per path                    pure
    device.py  the UDP/4791 socket "NIC" and its progress loop       sockets (no root)
    oob.py     perftest-like TCP exchange of QPN/PSN/rkey/addr        sockets
    perf.py    write_bw / send_bw / write_lat client and server       sockets
    netns.py   two namespaces + veth (+ HTB) in a RunRegistry         root glue
"""
