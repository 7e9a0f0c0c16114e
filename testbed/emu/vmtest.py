"""``make vm-test``: build (or find) the cached VM image, then run tests/vm — the harness's fault tests on
the host and, inside a booted VM, the kernel-backend subset (tests/vm/guest) and long_haul_cnp --quick.

Prints the image build time (cached or from scratch), the boot time and the pytest summary, and writes
them to ``results/vm-test/<stamp>/timings.json`` next to the guest logs. Exit status: pytest's.

``make link-fidelity`` (docs/link-fidelity.md) is :mod:`testbed.bench.link_vm`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from testbed.emu.cpustat import load_average
from testbed.emu.vm import remove_stale_dirs
from testbed.emu.vmimage import VMError, ensure_image

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.emu.vmtest", description=__doc__.splitlines()[0])
    ap.add_argument("--rebuild", action="store_true", help="rebuild the image even when cached")
    ap.add_argument("--out", help="results folder (default results/vm-test/<timestamp>)")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (e.g. -k harness)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("vm-test: needs root (sudo make vm-test)", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else REPO / "results" / "vm-test" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        image, built = ensure_image(rebuild=args.rebuild)
    except VMError as exc:
        print(f"vm-test: {exc}", file=sys.stderr)
        return 1
    t_image = time.monotonic() - t0
    # A harness killed with -9 (a CI job cancelled mid-run) leaves its folder; the fault tests check that
    # nothing is left, so what dead owners left is removed (and named) first, as `testbed clean` would.
    for d, why in remove_stale_dirs():
        print(f"vm-test: removed {d}: {why}")
    print(f"vm-test: image {image.key} ({'built' if built else 'cached'}) in {t_image:.0f} s; "
          f"{image.manifest().get('kernel_package')}, initrd {int(image.manifest()['initrd_bytes']) >> 20} MiB")
    env = {**os.environ, "TESTBED_VM_OUT": str(out)}
    t1 = time.monotonic()
    rc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-ra", "-s",
                         "tests/vm", f"--junitxml={out / 'host-junit.xml'}", *args.pytest_args],
                        cwd=REPO, env=env).returncode
    timings = {"image_s": round(t_image, 1), "image_built": built, "tests_s": round(time.monotonic() - t1, 1),
               "load": load_average()}
    try:
        timings.update(json.loads((out / "timings.json").read_text()))
    except (OSError, ValueError):
        pass
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    print(f"vm-test: {json.dumps(timings)}; results in {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
