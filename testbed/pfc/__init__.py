"""Lossless Ethernet (IEEE 802.1Qbb PFC), pure: config, state machine, headroom, frames, watchdog, deadlock.

    config.py    the spec's ``pfc:`` block (PfcConfig, WatchdogParams, DSCP -> priority)
    state.py     PfcIngress (accounting, PAUSE/XON decisions) and PfcEgress (honouring PAUSE), ``now`` given
    headroom.py  headroom from cable length, rate, MTU and the peer's response time
    frame.py     the PFC frame: Scapy layer and a struct codec
    watchdog.py  storm detection, drop/ignore, restoration
    deadlock.py  buffer-dependency graph per priority from the routing brain's routes; cycles
    sim.py       a discrete-event model check chaining the above (incast), not an emulation result

Nothing here needs root or starts processes; see docs/pfc.md.
"""
