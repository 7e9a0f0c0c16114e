"""Starting the controller process: from any working directory (relative results folders work), and a
controller that dies is reported at once with its log, not after the readiness timeout (no root)."""

from __future__ import annotations

import time

import pytest

from controllers.launch import start_controller
from testbed.errors import EmulationError
from testbed.topo import addressing
from testbed.topo import generators as gen


def test_started_outside_the_repository_with_a_relative_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    G = addressing.assign(gen.spine_leaf(2, 2, 1))
    ctl = start_controller(None, G, "rel/out", lldp_interval=0)
    try:
        health = ctl.wait_api(timeout=30)
        assert health["status"] == "ok" and health["switches_expected"] == 4
        assert ctl.log == tmp_path / "rel" / "out" / "controller.log" and ctl.graph_file.is_absolute()
    finally:
        ctl.stop()


def test_a_controller_that_dies_is_noticed_at_once(tmp_path, monkeypatch):
    G = addressing.assign(gen.spine_leaf(2, 2, 1))
    monkeypatch.chdir(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(EmulationError, match=r"controller exited with status \d+; see .*controller.log"):
        start_controller(None, G, "out", mode="no-such-mode", lldp_interval=0)  # its argparse exits 2
    assert time.monotonic() - t0 < 15  # the readiness wait is 30 s; it must not be sat out
