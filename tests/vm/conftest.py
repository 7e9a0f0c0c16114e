"""tests/vm: the VM harness on the host (root + QEMU; `make vm-test`) and guest/ (run *inside* the test VM
by test_kernel_vm.py, on the kernel backends).

Outside the VM the guest tests are not collected at all (they belong to another machine; they are not
skipped), and inside it the host tests are not. ``make vm-test`` (testbed/emu/vmtest.py) builds the image
first and exports ``TESTBED_VM_OUT`` (the results folder); run alone, ``pytest tests/vm`` finds or builds
the image itself. Without root the host tests skip saying so; a missing QEMU fails (vm-test installs it).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IN_VM = bool(os.environ.get("TESTBED_KERNEL_TESTS"))  # set by `make kernel-test`
HOST_TESTS = ["test_kernel_vm.py", "test_harness.py", "test_cluster_vm.py"]
collect_ignore = HOST_TESTS if IN_VM else []
collect_ignore_glob = [] if IN_VM else ["guest/*"]


@pytest.fixture(scope="session")
def vm_image():
    if os.geteuid() != 0:
        pytest.skip("VM tests need root (sudo make vm-test)")
    if not shutil.which("qemu-system-x86_64"):
        pytest.fail("qemu-system-x86_64 missing: `make vm-test` installs qemu-system-x86 first")
    from testbed.emu.vmimage import ensure_image

    image, _ = ensure_image()
    return image


@pytest.fixture(scope="session")
def vm_out() -> Path:
    base = os.environ.get("TESTBED_VM_OUT")
    path = Path(base) if base else REPO / "results" / "vm-test" / time.strftime("%Y%m%d-%H%M%S")
    path.mkdir(parents=True, exist_ok=True)
    return path
