"""The replica runs each namespace's tc commands as one ``tc -batch`` (no root: the node is faked): the
script is the commands without their ``tc``, and a failing line is named with its link."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from testbed.emu.replica import Replica
from testbed.errors import EmulationError


class FakeNode:
    def __init__(self, name, out="", rc=0):
        self.name, self.out, self.rc, self.scripts = name, out, rc, []

    def popen(self, argv, **kw):
        node = self

        class P:
            returncode = node.rc

            def communicate(self, script, timeout=None):
                node.scripts.append((argv, script))
                return node.out, None
        return P()


def _cmds():
    e1 = SimpleNamespace(u="t0", v="a0", backend="htb")
    e2 = SimpleNamespace(u="t0", v="a1", backend="htb")
    return [(e1, ["tc", "qdisc", "replace", "dev", "t0-eth1", "root", "handle", "5:", "htb"]),
            (e2, ["tc", "qdisc", "replace", "dev", "t0-eth2", "root", "handle", "5:", "htb"])]


def test_one_batch_per_namespace_without_the_tc_word():
    node = FakeNode("t0")
    Replica._tc_batch(None, node, _cmds())
    (argv, script), = node.scripts
    assert argv == ["tc", "-batch", "-"]
    assert script == "qdisc replace dev t0-eth1 root handle 5: htb\nqdisc replace dev t0-eth2 root handle 5: htb\n"


def test_the_failing_line_is_named_with_its_link():
    node = FakeNode("t0", out='Cannot find device "t0-eth2"\nCommand failed -:2\n', rc=1)
    with pytest.raises(EmulationError) as err:
        Replica._tc_batch(None, node, _cmds())
    msg = str(err.value)
    assert "t0--a1 (htb) on t0" in msg and "dev t0-eth2" in msg and 'Cannot find device "t0-eth2"' in msg
    assert "\n" not in msg
