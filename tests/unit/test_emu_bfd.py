"""BFD settings for OVS: real intervals dilated, OVS's millisecond floor refused by field (no root)."""

from __future__ import annotations

import pytest

from testbed.emu.bfd import bfd_argv, bfd_settings
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
