"""``python -m testbed.pfc.line ... --pfc JSON``: the Python delay line with PFC in both directions (root).

The same command line as ``python -m testbed.links.delayline`` plus ``--pfc`` (a
:class:`testbed.pfc.link.PfcPort` as JSON); it lives here so that the delay line imports nothing of
``testbed.pfc`` (which builds on ``testbed.links``). :func:`testbed.links.delayline.build_argv` renders it.
"""

from __future__ import annotations

import sys

from testbed.links import delayline
from testbed.pfc.link import PfcPort


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--pfc" not in argv or argv.index("--pfc") + 1 >= len(argv):
        print("python -m testbed.pfc.line: --pfc JSON is required (else run testbed.links.delayline)",
              file=sys.stderr)
        return 2
    i = argv.index("--pfc")
    port = PfcPort.from_json(argv[i + 1])
    return delayline.main(argv[:i] + argv[i + 2:], pfc=port)


if __name__ == "__main__":
    sys.exit(main())
