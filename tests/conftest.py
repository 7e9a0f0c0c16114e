"""Markers: tests that need root, Mininet, OVS or BMv2 say so and skip, with the reason, only where the
thing is genuinely absent (on the project's CI machine they are all present and run).

``-ra`` (pyproject's addopts) makes the summary name every skip. Under ``TESTBED_STRICT=1`` (set by
``.ci/run``) a missing tool *fails* the test instead: on the CI machine setup must have installed it,
so a failed BMv2 or OVS install cannot turn those tests into skips and leave CI green.

Every test that needs something the machine may lack says so with a marker, never with its own
``pytest.skip``, so that this one hook decides: ``root``, ``mininet``, ``ovs``, ``bmv2``, ``ipv6`` (an
IPv6 loopback), and ``tool(NAME, ...)`` for programs setup installs (``@pytest.mark.tool("tshark")``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # so tests can import scenarios/ modules


def _have_ovs() -> bool:
    if not shutil.which("ovs-vsctl"):
        return False
    return subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True).returncode == 0


def _have_mininet() -> bool:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return False
    return True


def _have_bmv2() -> bool:
    return all(shutil.which(b) for b in ("simple_switch", "p4c-bm2-ss", "simple_switch_CLI"))


def _have_ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


_CHECKS = {
    "root": (lambda: os.geteuid() == 0, "needs root (run the suite with sudo make test)"),
    "mininet": (_have_mininet, "Mininet is not installed (sudo make setup)"),
    "ovs": (_have_ovs, "Open vSwitch is not running (sudo make setup)"),
    "bmv2": (_have_bmv2, "BMv2/p4c are not installed (sudo make setup; see testbed doctor)"),
    "ipv6": (_have_ipv6_loopback, "no IPv6 loopback (::1) on this machine"),
}
_cache: dict[str, bool] = {}


def _absent(reason: str) -> None:
    """Skip for ``reason``; under ``TESTBED_STRICT`` fail instead (CI: setup must have provided it)."""
    if os.environ.get("TESTBED_STRICT"):
        pytest.fail(f"{reason} [TESTBED_STRICT: this machine must have it]", pytrace=False)
    pytest.skip(reason)


def pytest_runtest_setup(item):
    for name, (check, reason) in _CHECKS.items():
        if item.get_closest_marker(name) is None:
            continue
        if name not in _cache:
            _cache[name] = bool(check())
        if not _cache[name]:
            _absent(reason)
    for mark in item.iter_markers("tool"):
        for tool in mark.args:
            if shutil.which(tool) is None:
                _absent(f"{tool} is not installed (sudo make setup)")


@pytest.fixture
def run_cli(capsys):
    """``run_cli(argv) -> (exit code, stdout, stderr)`` of the ``testbed`` CLI, run in this process."""
    from testbed import cli

    def run(argv):
        capsys.readouterr()
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err
    return run


@pytest.fixture
def quiet_cpu():
    """Wait (at most 60 s) until the CPUs are mostly idle before a timing-sensitive trial.

    Why: a test that tears down many namespaces leaves the kernel's network-namespace cleanup running in
    workqueues for a while; a timing trial started then saw 2-5 % late link-node frames in CI, though the same
    test passed alone. And this machine is a VM whose host steals CPU time in bursts: late frames track the
    steal trial by trial (docs/pfc.md "Lateness"; the long-haul quick trial passed at 0.4 % steal and had
    2-23 % of frames late at 1.5-9 % steal, minutes apart), so it also waits for a second without steal.
    The wait is bounded and never skips; the trial's own health verdict still decides.
    """
    from testbed.emu import cpustat
    from testbed.poll import poll

    def quiet() -> bool:
        s = cpustat.sample(1.0)   # keep-awake spinners are not load
        return s["busy"] < 0.25 and s["steal"] < 0.01

    def wait():
        try:
            poll(quiet, timeout=60, interval=0.0, what="CPUs mostly idle and the host not stealing")
        except TimeoutError:  # still busy after 60 s: run anyway, the trial reports its own health
            pass

    wait()
    return wait


def pytest_collection_modifyitems(config, items):
    """Run ``timing_first`` tests before every other test of the session.

    Why: in CI the long-haul headline test saw 2-5 % late link-node frames after ten minutes of other tests
    building and tearing down replicas, yet passed alone on the same idle machine; a run that starts before
    that churn measures the emulator, not the leftovers. (Order is otherwise unchanged.)
    """
    items.sort(key=lambda item: item.get_closest_marker("timing_first") is None)
