"""`testbed doctor --json` as root: probes by trying, picks backends consistently, leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.doctor import NAMES, pick_backends

pytestmark = [pytest.mark.root]

REPO = Path(__file__).resolve().parents[2]


def test_doctor_json_as_root():
    before = set(p.name for p in Path("/sys/class/net").iterdir())
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "doctor", "--json"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    caps = doc["capabilities"]
    assert list(caps) == list(NAMES)
    assert caps["root"]["present"] and caps["netns"]["present"] and caps["veth"]["present"]
    assert all(isinstance(c["detail"], str) and c["detail"] for c in caps.values())
    assert doc["backends"] == pick_backends(caps)
    ovs_up = subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True).returncode == 0
    assert caps["ovs_user"]["present"] == ovs_up
    # Independent check of one probe, on our own veth (never on a shared interface).
    subprocess.run(["ip", "link", "add", "emudoc-a", "type", "veth", "peer", "name", "emudoc-b"], check=True)
    try:
        netem = subprocess.run(["tc", "qdisc", "add", "dev", "emudoc-a", "root", "netem", "delay", "1ms"],
                               capture_output=True, text=True)
    finally:
        subprocess.run(["ip", "link", "del", "emudoc-a"])
    assert caps["netem"]["present"] == (netem.returncode == 0)
    after = set(p.name for p in Path("/sys/class/net").iterdir())
    assert not {n for n in after - before if n.startswith("tbd")}, "probe interfaces left behind"
    assert not list(Path("/run/netns").glob("tbd*"))
