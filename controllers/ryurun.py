"""Run the fabric app under real Ryu (``ryu-manager``), in a Ryu environment (``scripts/ryu-env.sh``).

    TESTBED_FABRIC_ARGS="--graph G.json --api-port 8653" \\
        .venv-ryu/bin/python -m controllers.ryurun --ofp-listen-host 127.0.0.1 --ofp-tcp-listen-port 6653

is ``ryu-manager controllers.fabric`` with two things first: the framework import is pointed at Ryu
(``TESTBED_OF_FRAMEWORK=ryu``, see :mod:`controllers.compat`), and ``eventlet.wsgi.ALREADY_HANDLED``,
which Ryu 4.34's ``ryu.app.wsgi`` imports and eventlet >= 0.30.3 no longer has, is supplied (the
eventlet that still has it cannot run on Python 3.11). Nothing else of Ryu is changed. Pass
``--ofp-listen-host 127.0.0.1``: ryu-manager listens on every address by default.
"""

from __future__ import annotations

import os
import sys


def main(argv=None) -> int:
    os.environ["TESTBED_OF_FRAMEWORK"] = "ryu"
    import eventlet.wsgi

    if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
        eventlet.wsgi.ALREADY_HANDLED = object()  # a sentinel nobody compares with in our app
    from ryu.cmd.manager import main as ryu_manager

    sys.argv = ["ryu-manager", *(sys.argv[1:] if argv is None else argv), "controllers.fabric"]
    return ryu_manager() or 0


if __name__ == "__main__":
    sys.exit(main())
