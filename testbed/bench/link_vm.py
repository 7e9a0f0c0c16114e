"""``make link-fidelity``: docs/link-fidelity.md, the link-fidelity cases on both link backends side by side,
measured in the test VM (its Debian kernel has sch_netem and sch_red; this machine's has neither).

Boots one VM from the cached image (docs/vm.md), provisions it with scripts/setup.sh, gives it this host's
compiled link core (the image has no compiler), runs ``testbed bench link --kernel --cores c --slow-cpu``
inside and copies its markdown table to docs/link-fidelity.md (raw figures: ``<out>/vm0/bench-link.json``).

    sudo python -m testbed.bench.link_vm [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from testbed.emu.cpustat import load_average

REPO = Path(__file__).resolve().parents[2]
#: The full slow-cpu profile, its table to /mnt/out (the VM's results folder).
COMMAND = ("testbed bench link --kernel --cores c --slow-cpu --out /tmp/bench-link "
           "--markdown /mnt/out/link-fidelity.md --json > /mnt/out/bench-link.json")


def main(argv: list[str] | None = None) -> int:
    from testbed.emu.vm import VMGroup
    from testbed.emu.vmimage import VMError, ensure_image
    from testbed.links.core import CoreBuildError, build

    ap = argparse.ArgumentParser(prog="python -m testbed.bench.link_vm", description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="results folder (default results/link-fidelity/<timestamp>)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("link-fidelity: needs root (sudo make link-fidelity)", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else REPO / "results" / "link-fidelity" / time.strftime("%Y%m%d-%H%M%S")
    host = f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in load_average())} at the start"
    try:
        core = build()
        image, _built = ensure_image()
        with VMGroup(image, out, names=("vm0",)) as vms:
            vm = vms["vm0"]
            vm.run("bash scripts/setup.sh", timeout=600)
            vms.install_file("vm0", core, "${TESTBED_P4_CACHE:?}")
            res = vm.run(f"TESTBED_VM_HOST='QEMU {vms.accel} on the host: {host}' {COMMAND}", timeout=3600)
            print(res.output)
    except (VMError, CoreBuildError) as exc:
        print(f"link-fidelity: {exc}", file=sys.stderr)
        return 1
    target = REPO / "docs" / "link-fidelity.md"
    target.write_text((out / "vm0" / "link-fidelity.md").read_text())
    print(f"link-fidelity: wrote {target} (raw figures: {out / 'vm0' / 'bench-link.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
