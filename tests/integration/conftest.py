"""The integration session keeps the vCPUs awake (one SCHED_IDLE spinner per CPU, testbed/emu/awake.py).

Why: this project's CI machine is a nested VM whose idle vCPUs halt, and waking one is booked as host
steal and delivered late; every timing check (link pacing, delay, PFC release, failover windows) then
measures the hypervisor. CI failed on such checks far from the code they test (the Python line's
iperf3 rate at 89 of 100 Mbit/s after twelve minutes of other tests; the DCI outage window 14 ms over the
model), and each passed alone. The spinners never delay real work and are not counted as load
(testbed/emu/cpustat.py), so the suite measures the emulator.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def keep_awake():
    if os.geteuid() != 0:   # the integration tests need root; without it they skip, and nothing spins
        yield None
        return
    from testbed.emu.awake import for_machine
    from testbed.emu.registry import RunRegistry

    with RunRegistry("keep-awake", exclusive=False) as run, for_machine(run) as awake:   # TESTBED_KEEP_AWAKE=0: off
        yield awake
