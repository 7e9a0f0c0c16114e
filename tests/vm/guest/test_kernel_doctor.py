"""Inside the test VM: `testbed doctor` finds netem, RED, the OVS kernel datapath and rdma_rxe by trying,
and picks the kernel backends for them (issue 14)."""

from __future__ import annotations

import json
import subprocess
import sys

from testbed.doctor import pick_backends


def test_doctor_finds_and_picks_the_kernel_backends():
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "doctor", "--json"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-500:]
    doc = json.loads(res.stdout)
    caps = doc["capabilities"]
    missing = {name: caps[name]["detail"] for name in ("netem", "red", "ovs_kernel", "rxe")
               if not caps[name]["present"]}
    assert not missing, missing
    assert doc["backends"]["switch"] == "ovs-kernel"
    assert doc["backends"]["delay"] == "netem"
    assert doc["backends"]["ecn"] == "red"
    assert doc["backends"]["rdma"] == "soft"   # rxe is reported, but testbed rdma cannot run over it yet
    assert doc["backends"] == pick_backends(caps)
