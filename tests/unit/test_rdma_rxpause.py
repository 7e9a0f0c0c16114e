"""The soft NIC's receive-side PFC (pure state) and the slow host's receive limit (loopback sockets)."""

from __future__ import annotations

import socket
import time

import pytest

from testbed.errors import SpecError
from testbed.rdma.device import Device
from testbed.rdma.rxpause import RxPause, rmem_alloc, socket_drops


def test_pause_at_xoff_refresh_while_above_xon_and_xon_once_drained():
    st = RxPause(xoff_bytes=100, xon_bytes=50, refresh_s=1.0, priority=3, quanta=1000)
    assert st.check(99, 0.0) == []
    (f,) = st.check(100, 0.5)
    assert f.times == ((3, 1000),) and st.paused
    assert st.check(80, 1.0) == []                       # above xon, refresh not due
    (r,) = st.check(70, 1.5)                             # due: refreshed before the pause runs out
    assert r.times == ((3, 1000),)
    (x,) = st.check(50, 2.0)
    assert x.times == ((3, 0),) and not st.paused        # XON: pause time 0
    c = st.counters(3.0)
    assert (c["pause_sent"], c["xon_sent"], c["max_bytes"]) == (2, 1, 100)
    assert c["paused_s"] == pytest.approx(1.5) and c["paused_now"] is False
    assert st.check(60, 3.0) == []                       # below xoff again: nothing


@pytest.mark.parametrize("kw, field", [({"xon_bytes": 100}, "xon"), ({"refresh_s": 0}, "refresh_s"),
                                       ({"priority": 8}, "priority"), ({"quanta": 0}, "quanta")])
def test_bad_settings_name_their_field(kw, field):
    base = {"xoff_bytes": 100, "xon_bytes": 50, "refresh_s": 1.0}
    with pytest.raises(SpecError, match=field):
        RxPause(**{**base, **kw})


def test_a_slow_host_takes_datagrams_off_at_its_rate_and_the_queue_holds_the_rest():
    with Device("127.0.0.1", 0, seed=5, rx_limit_pps=200) as dev, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        for _ in range(300):
            tx.sendto(bytes(100), ("127.0.0.1", dev.port))
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.5:
            dev.progress(timeout=0.01)
        took = dev.stats["rx"]
        assert 0 < took <= 0.5 * 200 + 8 + 10, took       # its rate (and a burst of 8), never the queue's
        assert rmem_alloc(dev.sock) > 0 and socket_drops(dev.sock) == 0
    with pytest.raises(SpecError, match="rx_limit_pps"):
        Device("127.0.0.1", 0, rx_limit_pps=0)
