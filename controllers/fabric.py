"""The fabric controller: an os-ken OpenFlow 1.3 app that is a thin shim over :class:`ControllerCore`.

Run by the testbed as its own process, everything on loopback::

    python -m controllers.fabric --graph G.json --of-port 6653 --api-port 8653 [--mode fast-failover]

    OVS switches --OpenFlow 1.3 (127.0.0.1:of-port)--> FabricApp --> ControllerCore --> RoutingBrain
    testbed / scenarios / benches --HTTP JSON (127.0.0.1:api-port)--> StatusAPI --^

Each event handler takes the lock, calls one core method with the wall clock, and sends what it returns;
exceptions are logged and counted (``handler_errors`` in ``/health``), never fatal. The HTTP API:

    GET  /health                      liveness, switches connected, counters of bad input
    GET  /topology                    switches, hosts, links (up, seen by LLDP), LLDP mismatches, port names
    GET  /paths?src=H&dst=H           paths packets take now (walked through the installed tables)
    GET  /ports[?fresh=1]             per-port counters (fresh: ask every switch and wait for replies)
    GET  /events                      failover events with timestamps
    GET  /routes[?switch=S]           the routes the brain holds
    POST /fail/link?a=A&b=B           ports of link A-B administratively down (restore: /restore/link)
    POST /fail/switch?s=S             every port of S down (restore: /restore/switch)
    POST /mode?m=fast-failover        re-push every group in another mode (controller | fast-failover)
    POST /ecmp?m=select               re-push every route with another ECMP method (multipath | select)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from controllers import compat, ofrules
from controllers.compat import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    BaseApp,
    app_manager,
    ofp_event,
    ofproto_v1_3,
    set_ev_cls,
)
from controllers.core import ControllerCore
from controllers.graphio import load_graph
from testbed.routing.gray import GrayPolicy

LOG = logging.getLogger("controllers.fabric")

#: Filled by :func:`main` before the framework instantiates the app (it passes apps no arguments).
SETTINGS: dict = {}


class FabricApp(BaseApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        settings = _settings()
        compat.wake_sender_on_eof()  # a closed connection must reach DEAD_DISPATCHER (switch loss)
        self.lock = threading.RLock()
        gray = settings.get("gray_interval", 0.0)
        self.core = ControllerCore(settings["graph"], mode=settings.get("mode", "controller"),
                                   started=time.time(), aggregate=settings.get("aggregate", False),
                                   ecmp=settings.get("ecmp", "multipath"),
                                   gray=GrayPolicy.for_interval(gray) if gray > 0 else None)
        self.pending_stats: set = set()
        self.stats_done = threading.Condition(self.lock)
        self.api = StatusAPI(self, SETTINGS.get("api_port", 0))
        self._stop = threading.Event()

    def start(self):
        thread = super().start()
        self.api.start()
        interval = SETTINGS.get("lldp_interval", 10.0)
        if interval > 0:
            threading.Thread(target=self._lldp_loop, args=(interval,), daemon=True, name="lldp").start()
        gray = SETTINGS.get("gray_interval", 0.0)
        if gray > 0:
            threading.Thread(target=self._gray_loop, args=(gray,), daemon=True, name="gray").start()
        return thread

    def stop(self):
        self._stop.set()
        self.api.stop()
        super().stop()

    def _lldp_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._guard("lldp", lambda: self.send(self.core.lldp_all()))

    def _gray_loop(self, interval: float) -> None:
        """Poll every switch's port counters each ``interval`` and let the core judge them (gray failure)."""
        while not self._stop.wait(interval):
            self.refresh_counters(timeout=interval)
            self._guard("gray", self._gray_once)

    def _gray_once(self) -> None:
        now = time.time()
        self._push_event(lambda: self.core.gray_check(now), now)

    # ------------------------------------------------------------------ helpers
    def send(self, pairs, batch: int = 32) -> int:
        """Send ``(switch, message)`` pairs in order (rendering may be lazy); returns how many went out.

        Consecutive messages to one switch are serialised into one buffer (up to ``batch``): os-ken hands
        every send to a writer thread through a 16-slot queue, and on a busy machine that hand-off, not
        the wire, is what made a 128-message failover take tens of milliseconds.
        """
        n = 0
        chunk: list = []
        chunk_dp = None
        for sw, m in pairs:
            dp = self.core.dps.get(sw)
            if dp is None:
                continue
            if dp is not chunk_dp or len(chunk) >= batch:
                if chunk:
                    chunk_dp.send(b"".join(chunk))
                chunk, chunk_dp = [], dp
            dp.set_xid(m)
            m.serialize()
            chunk.append(bytes(m.buf))
            n += 1
        if chunk:
            chunk_dp.send(b"".join(chunk))
        self.core.stats["messages_sent"] += n
        return n

    def _guard(self, what: str, fn) -> None:
        """Run ``fn`` under the lock; log and count any exception instead of dying."""
        with self.lock:
            try:
                fn()
            except Exception:  # noqa: BLE001 - one bad event must not stop the controller
                self.core.stats["handler_errors"] += 1
                LOG.exception("error while handling %s (carrying on)", what)

    # ------------------------------------------------------------------ OpenFlow events
    def _push_event(self, pairs_of, now: float) -> None:
        """Send what one event returns; stamp the failover it logged (if any) with push time and count."""
        before = len(self.core.failovers)
        sent = self.send(pairs_of())
        if len(self.core.failovers) > before:
            ev_ = self.core.failovers[-1]
            ev_.pushed, ev_.messages = time.time(), sent
            LOG.info("%s %s: %d destinations, %d messages, pushed in %.1f ms", ev_.kind, "-".join(ev_.link),
                     ev_.destinations, sent, (ev_.pushed - now) * 1e3)

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        dp = ev.msg.datapath

        def handle():
            now = time.time()
            dpid = ev.msg.datapath_id  # dp.id is set by the framework's handshake app, maybe not yet
            if self.core.switch_of(dpid) is None:
                self.core.join(dpid, dp, now)  # recorded as unknown
                LOG.warning("unknown datapath %#x connected; not in the fabric graph, not programmed", dpid)
                return
            self._push_event(lambda: self.core.join(dpid, dp, now), now)
            LOG.info("switch %s (dpid %#x) connected", self.core.switch_of(dpid), dpid)
        self._guard("switch features", handle)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def on_dead(self, ev):
        dp = ev.datapath
        if dp.id is None:
            return

        def handle():
            now = time.time()
            LOG.info("datapath %#x (%s) disconnected", dp.id, self.core.switch_of(dp.id))
            self._push_event(lambda: self.core.disconnect(dp.id, now, dp), now)
        self._guard("disconnect", handle)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def on_port_desc(self, ev):
        dp = ev.msg.datapath
        self._guard("port desc", lambda: self.send(self.core.port_desc(dp.id, ev.msg.body, time.time())))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev):
        msg = ev.msg
        d = msg.desc

        def handle():
            now = time.time()
            name = d.name.decode(errors="replace") if isinstance(d.name, bytes) else str(d.name)
            self._push_event(lambda: self.core.port_status(msg.datapath.id, d.port_no, name, d.hw_addr, d.config,
                                                           d.state, now, msg.reason), now)
        self._guard("port status", handle)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg

        def handle():
            in_port = msg.match.get("in_port") if msg.match is not None else None
            if in_port is None:
                self.core.stats["malformed"] += 1
                return
            self.send(self.core.packet_in(msg.datapath.id, in_port, bytes(msg.data or b"")))
        self._guard("packet-in", handle)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def on_port_stats(self, ev):
        dp = ev.msg.datapath

        def handle():
            self.core.port_stats(dp.id, ev.msg.body, time.time())
            self.pending_stats.discard(dp.id)
            self.stats_done.notify_all()
        self._guard("port stats", handle)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev):
        msg = ev.msg
        with self.lock:
            self.core.stats["errors"] += 1
        LOG.warning("OpenFlow error from %#x: type %s code %s", msg.datapath.id or 0, msg.type, msg.code)

    # ------------------------------------------------------------------ used by the API
    def refresh_counters(self, timeout: float = 2.0) -> None:
        """Ask every connected switch for port counters and wait (bounded) for the replies."""
        with self.lock:
            for dp in self.core.dps.values():
                self.pending_stats.add(dp.id)
                dp.send_msg(dp.ofproto_parser.OFPPortStatsRequest(dp, 0, dp.ofproto.OFPP_ANY))
            self.stats_done.wait_for(lambda: not self.pending_stats, timeout=timeout)
            self.pending_stats.clear()


class StatusAPI:
    """JSON over HTTP on 127.0.0.1 only (see the module docstring for the routes)."""

    def __init__(self, app: FabricApp, port: int):
        self.app = app
        handler = type("Handler", (_Handler,), {"app": app})
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, daemon=True, name="status-api").start()
        LOG.info("status API on http://127.0.0.1:%d", self.port)

    def stop(self) -> None:
        self.server.shutdown()


class _Handler(BaseHTTPRequestHandler):
    app: FabricApp = None  # set per server

    def log_message(self, fmt, *args):  # quiet: the API is polled
        LOG.debug("api: " + fmt, *args)

    def _reply(self, code: int, doc) -> None:
        body = json.dumps(doc, default=str).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        app, core = self.app, self.app.core
        try:
            if method == "GET" and url.path == "/health":
                with app.lock:
                    return self._reply(200, core.health_doc(time.time()))
            if method == "GET" and url.path == "/topology":
                with app.lock:
                    return self._reply(200, core.topology_doc())
            if method == "GET" and url.path == "/paths":
                with app.lock:
                    return self._reply(200, core.paths_doc(q.get("src"), q.get("dst")))
            if method == "GET" and url.path == "/ports":
                if q.get("fresh") in ("1", "true", "yes"):
                    app.refresh_counters()
                with app.lock:
                    return self._reply(200, core.ports_doc())
            if method == "GET" and url.path == "/events":
                with app.lock:
                    return self._reply(200, core.events_doc())
            if method == "GET" and url.path == "/routes":
                with app.lock:
                    return self._reply(200, core.routes_doc(q.get("switch")))
            if method == "POST" and url.path in ("/fail/link", "/restore/link", "/fail/switch", "/restore/switch"):
                down = url.path.startswith("/fail")
                with app.lock:
                    if url.path.endswith("link"):
                        msgs = core.admin_link(q.get("a"), q.get("b"), down)
                    else:
                        msgs = core.admin_switch(q.get("s"), down)
                    sent = app.send(msgs)
                return self._reply(200, {"ok": True, "time": time.time(), "port_mods": sent})
            if method == "POST" and url.path == "/mode":
                with app.lock:
                    sent = app.send(core.set_mode(q.get("m")))
                return self._reply(200, {"ok": True, "mode": core.mode, "messages": sent})
            if method == "POST" and url.path == "/ecmp":
                with app.lock:
                    sent = app.send(core.set_ecmp(q.get("m")))
                return self._reply(200, {"ok": True, "ecmp": core.ecmp, "messages": sent})
            return self._reply(404, {"error": f"no route {method} {url.path}"})
        except KeyError as exc:
            return self._reply(400, {"error": str(exc.args[0]) if exc.args else "bad request"})
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            LOG.exception("api error on %s", self.path)
            return self._reply(500, {"error": f"{type(exc).__name__}: {exc}"})

    def do_GET(self):  # noqa: N802 - http.server naming
        self._route("GET")

    def do_POST(self):  # noqa: N802
        self._route("POST")


#: Environment variable carrying this app's options when a manager (``ryu-manager``, ``osken-manager``)
#: loads it instead of :func:`main`: ``TESTBED_FABRIC_ARGS="--graph G.json --api-port 8653"``.
ARGS_ENV = "TESTBED_FABRIC_ARGS"


def arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m controllers.fabric", description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", required=True, help="fabric graph, node-link JSON (controllers.graphio)")
    parser.add_argument("--of-port", type=int, default=6653, help="OpenFlow listen port on 127.0.0.1")
    parser.add_argument("--api-port", type=int, default=8653, help="status API port on 127.0.0.1")
    parser.add_argument("--mode", choices=ofrules.MODES, default="controller",
                        help="controller: reroute on port events; fast-failover: groups repair locally too")
    parser.add_argument("--ecmp", choices=ofrules.ECMP_METHODS, default="multipath",
                        help="multipath: NX multipath on IPs + L4 ports (OVS); select: OpenFlow 1.3 SELECT groups")
    parser.add_argument("--lldp-interval", type=float, default=10.0, help="seconds between LLDP rounds (0: off)")
    parser.add_argument("--gray-interval", type=float, default=0.0,
                        help="seconds between port-counter polls for gray-failure detection (0: off)")
    parser.add_argument("--aggregate", action="store_true",
                        help="one route per ToR's block of hosts where the address plan allows (fewer flows)")
    parser.add_argument("--verbose", action="store_true")
    return parser


def settings_from(args: argparse.Namespace) -> dict:
    return {"graph": load_graph(args.graph), "mode": args.mode, "api_port": args.api_port,
            "lldp_interval": args.lldp_interval, "aggregate": args.aggregate, "ecmp": args.ecmp,
            "gray_interval": args.gray_interval}


def _settings() -> dict:
    """What :func:`main` filled in, or (loaded by a manager) the options in ``$TESTBED_FABRIC_ARGS``."""
    if not SETTINGS:
        import os
        import shlex

        text = os.environ.get(ARGS_ENV)
        if not text:
            raise SystemExit(f"controllers.fabric: set {ARGS_ENV}='--graph G.json [--api-port N]' when "
                             "a manager loads this app")
        SETTINGS.update(settings_from(arg_parser().parse_args(shlex.split(text))))
    return SETTINGS


def main(argv=None) -> int:
    args = arg_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = compat.cfg
    cfg.CONF(args=[], project=compat.FRAMEWORK)
    cfg.CONF.set_override("ofp_listen_host", "127.0.0.1")
    cfg.CONF.set_override("ofp_tcp_listen_port", args.of_port)
    # Under ``python -m`` this file is __main__; the framework imports the app module by name, so fill
    # *that* module's SETTINGS.
    from controllers import fabric as app_module

    app_module.SETTINGS.update(settings_from(args))
    LOG.info("fabric controller (%s): OpenFlow 127.0.0.1:%d, API 127.0.0.1:%d, mode %s", compat.FRAMEWORK,
             args.of_port, args.api_port, args.mode)
    app_manager.AppManager.run_apps([compat.OFP_HANDLER, "controllers.fabric"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
