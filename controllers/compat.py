"""The one import of the OpenFlow framework: os-ken (OpenStack's maintained fork of Ryu) or Ryu itself.

Both have the same API under different package names (``os_ken`` / ``ryu``) and one renamed base class
(``OSKenApp`` / ``RyuApp``). Every controller module imports the framework from here, so the same app
runs under ``osken-manager``/``python -m controllers.fabric`` (os-ken) and ``ryu-manager`` (Ryu)::

    controllers.fabric, .core, .ofrules --> controllers.compat --> os_ken.*  (preferred)
                                                               \\-> ryu.*     (when os-ken is absent)

Ryu 4.34 (its last release, 2020) runs on this Python 3.11 only in its own environment with three
pins and one shim, all measured here (``scripts/ryu-env.sh``, ``controllers/ryurun.py``, docs/sdn.md):
its ``setup.py`` needs setuptools < 58 (``easy_install.get_script_args``); eventlet <= 0.30.2, which it
was written for, fails on 3.11 (``cannot set 'is_timeout' attribute of immutable type 'TimeoutError'``),
and eventlet >= 0.30.3 dropped ``eventlet.wsgi.ALREADY_HANDLED`` that ``ryu.app.wsgi`` imports, so the
launcher supplies that one name on eventlet 0.33.3 (with dnspython >= 2.3). os-ken is the default.

It also carries one fix for os-ken's *native* hub (threads instead of eventlet, the default): when a
switch closes its connection, ``Datapath.serve`` joins its sender thread, which sits blocked on an empty
queue forever (``hub.kill`` cannot stop a thread), so ``DEAD_DISPATCHER`` is never reported and a
crashed switch is never noticed. :func:`wake_sender_on_eof` queues one closing send when the receive
loop ends, so the sender returns, ``serve`` returns and the disconnect event fires.
"""

from __future__ import annotations

import os

#: ``ryu`` forces Ryu where both are installed (``controllers.ryurun`` sets it); default: os-ken first.
FRAMEWORK_ENV = "TESTBED_OF_FRAMEWORK"

try:
    if os.environ.get(FRAMEWORK_ENV) == "ryu":
        raise ImportError("Ryu requested by $TESTBED_OF_FRAMEWORK")
    from os_ken import cfg
    from os_ken.base import app_manager
    from os_ken.controller import controller as _controller
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from os_ken.lib.packet import arp, ether_types, ethernet, lldp, packet
    from os_ken.ofproto import nicira_ext, ofproto_v1_3, ofproto_v1_3_parser
    from os_ken.ofproto.ofproto_protocol import ProtocolDesc

    FRAMEWORK = "os_ken"
    BaseApp = app_manager.OSKenApp
except ImportError:  # pragma: no cover - exercised by tests/unit/test_controller_compat.py with a stand-in
    from ryu import cfg  # type: ignore[no-redef]
    from ryu.base import app_manager  # type: ignore[no-redef]
    from ryu.controller import controller as _controller  # type: ignore[no-redef]
    from ryu.controller import ofp_event  # type: ignore[no-redef]
    from ryu.controller.handler import (  # type: ignore[no-redef]
        CONFIG_DISPATCHER,
        DEAD_DISPATCHER,
        MAIN_DISPATCHER,
        set_ev_cls,
    )
    from ryu.lib.packet import arp, ether_types, ethernet, lldp, packet  # type: ignore[no-redef]
    from ryu.ofproto import nicira_ext, ofproto_v1_3, ofproto_v1_3_parser  # type: ignore[no-redef]
    from ryu.ofproto.ofproto_protocol import ProtocolDesc  # type: ignore[no-redef]

    FRAMEWORK = "ryu"
    BaseApp = app_manager.RyuApp

#: The framework's own OpenFlow handshake app, loaded next to ours.
OFP_HANDLER = f"{FRAMEWORK}.controller.ofp_handler"


def wake_sender_on_eof(datapath_cls=None) -> bool:
    """Make a datapath's end of connection reach ``DEAD_DISPATCHER`` (see the module docstring).

    Idempotent; returns True when the class was patched by this call.
    """
    cls = datapath_cls or _controller.Datapath
    if getattr(cls, "_testbed_wakes_sender", False):
        return False
    recv_loop = cls._recv_loop

    def _recv_loop(self):
        try:
            recv_loop(self)
        finally:
            # close_socket=True makes the sender leave its loop after this (empty) send
            self.send(b"", close_socket=True)

    cls._recv_loop = _recv_loop
    cls._testbed_wakes_sender = True
    return True


__all__ = ["CONFIG_DISPATCHER", "DEAD_DISPATCHER", "FRAMEWORK", "MAIN_DISPATCHER", "OFP_HANDLER", "BaseApp",
           "ProtocolDesc", "app_manager", "arp", "cfg", "ether_types", "ethernet", "lldp", "nicira_ext",
           "ofp_event", "ofproto_v1_3", "ofproto_v1_3_parser", "packet", "set_ev_cls", "wake_sender_on_eof"]
