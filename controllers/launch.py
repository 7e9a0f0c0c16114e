"""Start the fabric controller as its own process and talk to its status API.

    with RunRegistry("demo") as run:
        ctl = start_controller(run, G, out_dir, mode="controller")     # recorded in the run registry
        plan = plan_replica(G, plan_capabilities(), Overrides(links="off", static_arp=False))
        with Replica(plan, controller=ctl.address, run=run) as rep:
            ctl.wait_ready()                                            # every switch connected
            ctl.get("/paths", src="h0", dst="h15")

The graph handed over is completed with the addresses the replica will use (:func:`testbed.plan.layout.layout`),
so the controller's ARP answers and MAC rewrites match the hosts. Readiness is polled (the API answers),
never slept for. Ports come from one allocator: the first free ones from 6653 (OpenFlow) and 8653 (API).
Both listen on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import networkx as nx

from controllers.graphio import dump_graph
from testbed.errors import EmulationError
from testbed.plan.alloc import tcp_port_free
from testbed.poll import poll
from testbed.topo.graph import HOST

REPO = Path(__file__).resolve().parent.parent
OF_PORT_BASE = 6653
API_PORT_BASE = 8653


def free_port(base: int, taken=()) -> int:
    """First port from ``base`` that nothing on 127.0.0.1 listens on and is not in ``taken``."""
    port = base
    while port in taken or not tcp_port_free(port):
        port += 1
        if port > 65535:
            raise EmulationError(f"no free TCP port from {base}")
    return port


def addressed(G: nx.Graph) -> nx.Graph:
    """A copy of ``G`` whose hosts carry the ip/prefixlen/mac the replica will give them."""
    from testbed.plan.layout import layout

    H = G.copy()
    for h in layout(G).hosts:
        H.nodes[h.node].update(ip=h.ip, prefixlen=h.prefixlen, mac=h.mac)
    return H


class ApiError(EmulationError):
    """The controller's API refused a request (message carries its answer)."""


class ApiClient:
    """JSON over HTTP to a controller's status API on 127.0.0.1."""

    def __init__(self, api_port: int):
        self.api_port = api_port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def request(self, method: str, path: str, timeout: float = 10.0, **query):
        qs = ("?" + urllib.parse.urlencode(query)) if query else ""
        req = urllib.request.Request(self.url + path + qs, method=method, data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                detail = json.loads(exc.read()).get("error", "")
            except ValueError:
                detail = ""
            raise ApiError(f"controller API {method} {path}: {exc.code} {detail}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise ApiError(f"controller API at {self.url} does not answer: {exc}") from None

    def get(self, path: str, **query):
        return self.request("GET", path, **query)

    def post(self, path: str, **query):
        return self.request("POST", path, **query)


class ControllerHandle(ApiClient):
    """A running controller process; ``stop()`` ends it (the run registry also does on exit)."""

    def __init__(self, proc: subprocess.Popen, of_port: int, api_port: int, log: Path, graph_file: Path):
        super().__init__(api_port)
        self.proc = proc
        self.of_port = of_port
        self.log = log
        self.graph_file = graph_file

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.of_port)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _dead(self) -> EmulationError:
        return EmulationError(f"controller exited with status {self.proc.returncode}; see {self.log}")

    def _wait(self, ready, timeout: float, interval: float, what: str) -> dict:
        """Poll ``ready()`` (a truthy answer) but stop at once, naming the log, if the process has died."""
        def check():
            if not self.alive():
                return {"__dead__": True}
            return ready()
        try:
            got = poll(check, timeout=timeout, interval=interval, what=what)
        except TimeoutError as exc:
            if not self.alive():
                raise self._dead() from None
            raise EmulationError(f"{exc}; see {self.log}") from None
        if got.get("__dead__"):
            raise self._dead()
        return got

    def wait_api(self, timeout: float = 30.0) -> dict:
        """The API answers; raises at once when the controller process has exited."""
        return self._wait(lambda: self.get("/health"), timeout, 0.05, f"controller API on {self.url}")

    def wait_ready(self, timeout: float = 60.0) -> dict:
        """Every switch of the graph connected and programmed (raises at once if the controller died)."""
        return self._wait(lambda: (h := self.get("/health"))["ready"] and h, timeout, 0.1,
                          "all switches to connect to the controller")

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)


#: The Ryu environment ``scripts/ryu-env.sh`` builds (``$TESTBED_RYU_PYTHON`` overrides).
RYU_PYTHON = REPO / ".venv-ryu" / "bin" / "python"
FRAMEWORKS = ("os-ken", "ryu")


def ryu_python() -> Path:
    return Path(os.environ.get("TESTBED_RYU_PYTHON") or RYU_PYTHON)


def controller_argv(graph_file: Path, of_port: int, api_port: int, mode: str, lldp_interval: float,
                    aggregate: bool = False, ecmp: str = "multipath", gray_interval: float = 0.0) -> list:
    return [sys.executable, "-m", "controllers.fabric", *app_args(graph_file, of_port, api_port, mode,
                                                                  lldp_interval, aggregate, ecmp, gray_interval)]


def app_args(graph_file: Path, of_port: int, api_port: int, mode: str, lldp_interval: float,
             aggregate: bool = False, ecmp: str = "multipath", gray_interval: float = 0.0) -> list:
    return ["--graph", str(graph_file), "--of-port", str(of_port), "--api-port", str(api_port), "--mode", mode,
            "--lldp-interval", str(lldp_interval), "--ecmp", ecmp, "--gray-interval", str(gray_interval)] + \
        (["--aggregate"] if aggregate else [])


def ryu_argv(of_port: int) -> list:
    """``ryu-manager`` (through :mod:`controllers.ryurun`) on 127.0.0.1; the app's options go in the env."""
    return [str(ryu_python()), "-m", "controllers.ryurun", "--ofp-listen-host", "127.0.0.1",
            "--ofp-tcp-listen-port", str(of_port)]


def start_controller(run, G: nx.Graph, out_dir, mode: str = "controller", lldp_interval: float = 10.0,
                     wait: bool = True, aggregate: bool = False, framework: str = "os-ken",
                     ecmp: str = "multipath", gray_interval: float = 0.0) -> ControllerHandle:
    """Start ``python -m controllers.fabric`` for graph ``G``.

    Args:
        run: a RunRegistry (the process is recorded so cleanup is guaranteed) or None (tests without root:
            the caller stops the handle).
        G: the fabric graph.
        out_dir: receives ``controller-graph.json`` and ``controller.log``.
        mode: ``controller`` or ``fast-failover``.
        wait: poll until the API answers.
        aggregate: per-ToR prefix routes where the address plan allows (see RoutingBrain).
        ecmp: ``multipath`` (NX multipath) or ``select`` (OpenFlow 1.3 SELECT groups).
        gray_interval: seconds between port-counter polls for gray-failure detection (0: off).
        framework: ``os-ken`` (this environment) or ``ryu`` (real Ryu 4.34 under ryu-manager, from the
            environment ``scripts/ryu-env.sh`` builds).

    Raises:
        EmulationError: the process died or its API never answered (names the log).
    """
    if any(d.get("role") == HOST for _, d in G.nodes(data=True)) is False:
        raise EmulationError("the graph has no hosts; nothing to route")
    out_dir = Path(out_dir).resolve()  # the process runs in the repository, not in the caller's folder
    out_dir.mkdir(parents=True, exist_ok=True)
    graph_file = dump_graph(addressed(G), out_dir / "controller-graph.json")
    log = out_dir / "controller.log"
    of_port = free_port(OF_PORT_BASE)
    api_port = free_port(API_PORT_BASE, taken={of_port})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    if framework == "os-ken":
        argv = controller_argv(graph_file, of_port, api_port, mode, lldp_interval, aggregate, ecmp, gray_interval)
    elif framework == "ryu":
        if not ryu_python().exists():
            raise EmulationError(f"no Ryu environment at {ryu_python()}; build it with scripts/ryu-env.sh")
        argv = ryu_argv(of_port)
        env["TESTBED_FABRIC_ARGS"] = shlex.join(app_args(graph_file, of_port, api_port, mode, lldp_interval,
                                                         aggregate, ecmp, gray_interval))
    else:
        raise EmulationError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    if run is not None:
        proc = run.spawn(argv, log=log, env=env, cwd=str(REPO))
    else:
        with open(log, "ab") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=str(REPO),
                                    start_new_session=True)
    handle = ControllerHandle(proc, of_port, api_port, log, graph_file)
    if wait:
        try:
            handle.wait_api()
        except BaseException:
            handle.stop()
            raise
    return handle


def controllers_in_runs(docs: list[dict]) -> list[dict]:
    """Controllers recorded in run registry documents (pure: parses the recorded argv).

    Returns ``[{"run_id", "name", "pid", "api_port", "of_port", "mode"}]`` for live runs.
    """
    from testbed.emu.registry import live_processes

    found = []
    for doc, obj, argv in live_processes(docs):
        if not {"controllers.fabric", "controllers.ryurun"} & set(argv):
            continue
        opts = dict(zip(argv, argv[1:], strict=False))
        if "controllers.ryurun" in argv:  # the app's options travel in the environment: no API port here
            opts = {"--of-port": opts.get("--ofp-tcp-listen-port", 0), "--mode": "controller"}
        found.append({"run_id": doc.get("run_id"), "name": doc.get("name"), "pid": obj.get("pid"),
                      "api_port": int(opts.get("--api-port", 0)), "of_port": int(opts.get("--of-port", 0)),
                      "mode": opts.get("--mode", "controller")})
    return found


def find_controller(api_port: int | None = None) -> ApiClient:
    """The controller of the running replica: ``api_port`` if given, else the one in the run registry.

    Raises:
        UsageError: none is running, or several are and ``--api-port`` is needed to choose.
    """
    from testbed.errors import UsageError

    if api_port:
        return ApiClient(api_port)
    from testbed.emu.registry import load_runs

    found = controllers_in_runs(load_runs())
    if not found:
        raise UsageError("no running replica with a fabric controller found in the run registry "
                         "(start a scenario or pass --api-port)")
    if len(found) > 1:
        ports = ", ".join(str(f["api_port"]) for f in found)
        raise UsageError(f"several controllers are running (API ports {ports}); choose one with --api-port")
    if not found[0]["api_port"]:
        raise UsageError(f"the controller of run {found[0]['run_id']} runs under Ryu and its API port is not "
                         "recorded; pass --api-port")
    return ApiClient(found[0]["api_port"])
