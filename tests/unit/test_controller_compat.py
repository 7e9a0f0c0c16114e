"""The framework shim: a switch whose connection closes reaches the app (os-ken's native hub lost that
event), and the one import falls back to Ryu's package names (no root)."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import textwrap

from controllers.launch import REPO, start_controller
from testbed.poll import poll
from testbed.topo import addressing
from testbed.topo import generators as gen

OFP13 = 4
HELLO, FEATURES_REQUEST, FEATURES_REPLY = 0, 5, 6


def _handshake(of_port: int, dpid: int) -> socket.socket:
    """Be an OpenFlow 1.3 switch just long enough to be connected: hello, then a features reply."""
    s = socket.create_connection(("127.0.0.1", of_port), timeout=5)
    s.sendall(struct.pack("!BBHI", OFP13, HELLO, 8, 1))
    buf = b""
    while True:
        buf += s.recv(65535)
        off = 0
        while off + 8 <= len(buf):
            _, kind, length, xid = struct.unpack_from("!BBHI", buf, off)
            if kind == FEATURES_REQUEST:
                s.sendall(struct.pack("!BBHIQIBB2xII", OFP13, FEATURES_REPLY, 32, xid, dpid, 0, 254, 0, 0, 0))
                return s
            off += length


def test_a_closed_switch_connection_is_a_switch_down(tmp_path):
    G = addressing.assign(gen.spine_leaf(2, 2, 1))
    ctl = start_controller(None, G, tmp_path, lldp_interval=0)
    try:
        sw = poll(lambda: _handshake(ctl.of_port, G.nodes["s0"]["dpid"]), timeout=10, what="a handshake")
        poll(lambda: ctl.get("/health")["switches_connected"] == 1, timeout=10, what="s0 connected")
        sw.close()  # the switch is gone
        health = poll(lambda: (h := ctl.get("/health"))["down_switches"] and h, timeout=10,
                      what="the controller to notice s0 is gone")
        assert health["down_switches"] == ["s0"] and health["switches_connected"] == 0
        ev = ctl.get("/events")["failovers"][-1]
        assert (ev["kind"], ev["link"], ev["cause"]) == ("switch_down", ["s0"], "datapath-disconnect")
    finally:
        ctl.stop()


def test_the_one_import_takes_ryus_names_when_asked(tmp_path):
    # a stand-in "ryu" package whose modules are os-ken's, with Ryu's base-class name
    pkg = tmp_path / "ryu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent('''
        import importlib, importlib.abc, importlib.util, sys
        import os_ken.base.app_manager as _am
        _am.RyuApp = _am.OSKenApp
        del _am.OSKenApp  # Ryu has no OSKenApp: the shim must not need it
        class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path, target=None):
                return importlib.util.spec_from_loader(name, self) if name.startswith("ryu.") else None
            def create_module(self, spec):
                return importlib.import_module("os_ken" + spec.name[3:])
            def exec_module(self, module):
                pass
        sys.meta_path.insert(0, _Alias())
    '''))
    code = ("import sys; from controllers import compat, fabric; import importlib; ryu_app = importlib.import_module('ryu.base.app_manager').RyuApp; "
            "print(compat.FRAMEWORK, compat.OFP_HANDLER, compat.BaseApp is ryu_app, fabric.FabricApp.__mro__[1] is ryu_app)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(REPO),
                         env={"PYTHONPATH": f"{tmp_path}:{REPO}", "TESTBED_OF_FRAMEWORK": "ryu", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["ryu", "ryu.controller.ofp_handler", "True", "True"]
