"""BFD settings for OVS: real intervals dilated, OVS's millisecond floor refused by field (no root)."""

from __future__ import annotations

import pytest

from testbed.emu.bfd import bfd_argv, bfd_settings, parse_bfd_show
from testbed.emu.faults import blackhole_argv
from testbed.errors import SpecError


def test_intervals_are_dilated_and_whole_milliseconds():
    s = bfd_settings(0.05, 3, scale=10)
    assert s["min_tx"] == s["min_rx"] == "500" and s["mult"] == "3" and s["enable"] == "true"
    assert bfd_settings(0.0033, 3)["min_tx"] == "3"
    with pytest.raises(SpecError, match="bfd.interval"):
        bfd_settings(0.0001, 3)
    with pytest.raises(SpecError, match="bfd.mult"):
        bfd_settings(0.05, 0)


def test_one_transaction_for_every_interface():
    argv = bfd_argv(["a0-eth3", "cr0-eth1"], bfd_settings(0.01, 3))
    assert argv[0] == "ovs-vsctl" and argv.count("--") == 2
    i = argv.index("a0-eth3")
    assert argv[i - 2:i] == ["set", "Interface"] and "bfd:min_rx=10" in argv and "bfd:enable=true" in argv
    assert bfd_argv(["a0-eth3"], None)[-4:] == ["clear", "Interface", "a0-eth3", "bfd"]


# What ovs-appctl bfd/show printed for a session still on its start-up rate (OVS 3.1).
SLOW = """---- tbA-e1 ----
  Forwarding: false
  Detect Multiplier: 3
  Concatenated Path Down: false
  TX Interval: Approx 1000ms
  RX Interval: Approx 1000ms
  Detect Time: now +2789ms
  Next TX Time: now +411ms
  Last TX Time: now -589ms

  Local Flags: none
  Local Session State: init
  Local Diagnostic: No Diagnostic
  Local Discriminator: 0x5e1b4c33
  Local Minimum TX Interval: 1000ms
  Local Minimum RX Interval: 50ms

  Remote Flags: none
  Remote Session State: down
  Remote Minimum TX Interval: 1000ms
  Remote Minimum RX Interval: 50ms
  Remote Detect Multiplier: 3
"""


def test_bfd_show_gives_the_negotiated_rate_not_the_configured_one():
    t = parse_bfd_show(SLOW)
    assert t == {"detect_mult": 3, "tx_ms": 1000, "rx_ms": 1000, "state": "init", "remote_state": "down"}
    fast = parse_bfd_show(SLOW.replace("Approx 1000ms", "Approx 50ms").replace("Local Session State: init", "Local Session State: up"))
    assert fast["tx_ms"] == fast["rx_ms"] == 50 and fast["state"] == "up"
    assert parse_bfd_show("") == {}


def test_black_hole_drops_instead_of_queueing():
    assert blackhole_argv("a1-eth4", True) == [["tc", "qdisc", "replace", "dev", "a1-eth4", "root", "blackhole"]]
    assert blackhole_argv("a1-eth4", False) == [["tc", "qdisc", "del", "dev", "a1-eth4", "root"]]

