"""``make vm-test``: build (or find) the cached VM image, then run tests/vm — the harness's fault tests on
the host and, inside a booted VM, the kernel-backend subset (tests/vm/guest) and long_haul_cnp --quick.

Prints the image build time (cached or from scratch), the boot time and the pytest summary, and writes
them to ``results/vm-test/<stamp>/timings.json`` next to the guest logs. Exit status: pytest's.

``--fidelity`` (``make link-fidelity``) instead boots one VM and regenerates docs/link-fidelity.md with
``testbed bench link --kernel`` (kernel tc vs the userspace link node, side by side in the same guest).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from testbed.emu.vmimage import VMError, ensure_image

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.emu.vmtest", description=__doc__.splitlines()[0])
    ap.add_argument("--rebuild", action="store_true", help="rebuild the image even when cached")
    ap.add_argument("--out", help="results folder (default results/vm-test/<timestamp>)")
    ap.add_argument("--fidelity", action="store_true", help="regenerate docs/link-fidelity.md instead of testing")
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
    print(f"vm-test: image {image.key} ({'built' if built else 'cached'}) in {t_image:.0f} s; "
          f"{image.manifest().get('kernel_package')}, initrd {int(image.manifest()['initrd_bytes']) >> 20} MiB")
    if args.fidelity:
        return fidelity(image, out)
    env = {**os.environ, "TESTBED_VM_OUT": str(out)}
    t1 = time.monotonic()
    rc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-ra", "-s",
                         "tests/vm", f"--junitxml={out / 'host-junit.xml'}", *args.pytest_args],
                        cwd=REPO, env=env).returncode
    timings = {"image_s": round(t_image, 1), "image_built": built, "tests_s": round(time.monotonic() - t1, 1),
               "load": os.getloadavg()}
    try:
        timings.update(json.loads((out / "timings.json").read_text()))
    except (OSError, ValueError):
        pass
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    print(f"vm-test: {json.dumps(timings)}; results in {out}")
    return rc


#: The side-by-side run of docs/link-fidelity.md (``testbed bench link``, full slow-cpu profile).
FIDELITY_CMD = ("testbed bench link --kernel --cores c --slow-cpu --out /tmp/bench-link "
                "--markdown /mnt/out/link-fidelity.md --json > /mnt/out/bench-link.json")


def fidelity(image, out: Path) -> int:
    from testbed.emu.vm import VMGroup

    host = f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start"
    try:
        with VMGroup(image, out, names=("vm0",)) as vms:
            vm = vms["vm0"]
            vm.run("bash scripts/setup.sh", timeout=600)
            vms.install_link_core("vm0")
            res = vm.run(f"TESTBED_VM_HOST='QEMU {vms.accel} on the host: {host}' {FIDELITY_CMD}", timeout=3600)
            print(res.output)
    except VMError as exc:
        print(f"link-fidelity: {exc}", file=sys.stderr)
        return 1
    target = REPO / "docs" / "link-fidelity.md"
    target.write_text((out / "vm0" / "link-fidelity.md").read_text())
    print(f"link-fidelity: wrote {target} (raw figures: {out / 'vm0' / 'bench-link.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
