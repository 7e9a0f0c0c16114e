"""`testbed bench build` prints its figures on stdout like every data command (progress on stderr), with the
machine's load next to them; `--json` leaves exactly one JSON document on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]

REPO = Path(__file__).resolve().parents[2]


def _bench(*args):
    env = dict(os.environ, TESTBED_LOCK_WAIT=os.environ.get("TESTBED_LOCK_WAIT", "900"))
    return subprocess.run([sys.executable, "-m", "testbed.cli", "bench", "build", "fat-tree-k4", "--no-plain",
                           "--links", "none", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def test_bench_build_figures_on_stdout_with_the_load():
    res = _bench()
    assert res.returncode == 0, res.stderr[-2000:]
    assert "fat-tree-k4: 36 nodes (20 switches), 48 links" in res.stdout
    assert "teardown s" in res.stdout and "load average" in res.stdout
    assert "teardown s" not in res.stderr and "replica build 1/1" in res.stderr  # progress stays on stderr


def test_bench_build_json_is_the_only_stdout():
    res = _bench("--json")
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["nodes"] == 36 and doc["replica"]["build_s"] > 0 and doc["replica"]["teardown_s"] > 0
    assert len(doc["load_before"].split(", ")) == 3 and doc["plain"] is None
