"""CLI conventions: bad input and missing root give one clear line and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _testbed(*args, as_nobody=False):
    argv = [sys.executable, "-m", "testbed.cli", *args]
    if as_nobody and os.geteuid() == 0:   # the test is marked tool("setpriv")
        # An unprivileged uid that may still read the checkout: CI's clone can sit in a 0700 folder
        # (mktemp -d), which nobody could not even enter. CAP_DAC_READ_SEARCH grants reading only, and the
        # testbed's root check is the effective uid, so this is the non-root path as a user sees it.
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", *argv]
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME="/tmp")
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, env=env)


def test_unknown_subcommand_is_one_line_exit_2():
    res = _testbed("frobnicate")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "invalid choice: 'frobnicate'" in lines[0]
    assert res.stdout == ""


@pytest.mark.tool("setpriv")
@pytest.mark.parametrize("args", [("clean",), ("clean", "--json")])
def test_root_command_as_non_root_is_one_line_exit_2(args):
    res = _testbed(*args, as_nobody=True)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == "testbed: testbed clean needs root: run it with sudo"
    assert res.stdout == ""


def test_unknown_scenario_is_one_line_exit_2():
    res = _testbed("run", "no-such-scenario")
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "unknown scenario" in res.stderr


@pytest.mark.tool("setpriv")
def test_doctor_json_shape_as_non_root():
    import json

    res = _testbed("doctor", "--json", as_nobody=True)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc) == {"capabilities", "backends"}
    assert list(doc["capabilities"]) == ["root", "netns", "veth", "netem", "red", "ovs_kernel", "ovs_user",
                                         "bmv2", "p4c", "rxe", "tshark", "link_core"]
    assert doc["capabilities"]["root"]["present"] is False
    assert "needs root" in doc["capabilities"]["netns"]["detail"]
    assert set(doc["backends"]) == {"switch", "delay", "ecn", "rdma"}
