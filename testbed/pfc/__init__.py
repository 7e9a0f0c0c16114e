"""Lossless Ethernet (IEEE 802.1Qbb PFC), pure: config, state machine, headroom, frames, watchdog, deadlock.

    config.py    the spec's ``pfc:`` block (PfcConfig, WatchdogParams, DSCP -> priority)
    state.py     PfcIngress (accounting, PAUSE/XON decisions) and PfcEgress (honouring PAUSE), ``now`` given
    headroom.py  headroom from cable length, rate, MTU and the peer's response time
    frame.py     the PFC frame as a Scapy layer (build, dissect, print)
    wire.py      the same frame as bytes without Scapy, and DSCP -> priority of data frames
    trace.py     one direction's ingress/egress pair driven by a text trace: the compiled core's reference
    watchdog.py  storm detection, drop/ignore, restoration
    deadlock.py  buffer-dependency graph per priority from the routing brain's routes; cycles
    sim.py       a discrete-event model check chaining the above (incast, ring deadlock, watchdog),
                 not an emulation result

Nothing here needs root or starts processes; see docs/pfc.md.
"""
