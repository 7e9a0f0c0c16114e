"""The kernel path, for real: boot the test VM, provision it with scripts/setup.sh (the Vagrantfile's
provisioning), and run tests/vm/guest inside it (doctor's picks; netem, RED, OVS kernel datapath). Guest
output and results land in TESTBED_VM_OUT/vm0 (``/mnt/out`` in the guest), among them the long haul's quick
result with netem on the long haul (``long-haul-netem.md``; docs/vm.md)."""

from __future__ import annotations

import json
import re

import pytest

from testbed.bench.link_vm import install_host_builds
from testbed.emu.vm import VMGroup


@pytest.fixture(scope="module")
def vm(vm_image, vm_out):
    with VMGroup(vm_image, vm_out, names=("vm0",)) as g:
        (vm_out / "timings.json").write_text(json.dumps({"boot_s": round(g.boot_seconds, 1), "accel": g.accel}))
        # the userspace link node's core and BMv2's receive shim (the image has no compiler)
        install_host_builds(g)
        yield g["vm0"]


def _save(vm, name: str, text: str) -> None:
    (vm.out / name).write_text(text)


def test_provisioned_by_setup_sh_offline(vm):
    res = vm.provision()   # a failure: VMError naming the exit status, the last line, setup.log, the console
    assert "Open vSwitch" in res.output and "is running" in res.output
    assert "installing" not in res.output   # everything was in the image: no network needed


def test_guest_suite_on_kernel_backends(vm):
    res = vm.run("make kernel-test PYTEST='python -m pytest --junitxml=/mnt/out/guest-junit.xml'",
                 timeout=1800, check=False)
    _save(vm, "guest-pytest.log", res.output)
    print(res.output[-3000:])
    assert res.rc == 0, res.output[-3000:]
    summary = res.output.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and "skipped" not in summary and "failed" not in summary, summary
