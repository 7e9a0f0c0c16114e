"""``sudo testbed exec NODE -- CMD ...``: run a command in a node of the replica ``testbed up`` keeps up.

The command runs in the node's network (and mount) namespace, as Mininet's ``m`` utility does, with the
terminal's stdin/stdout; its exit status is this command's. As in the replica's shell, an argument that is
exactly a host's name stands for that host's address: ``testbed exec h0 -- ping -c1 h5``.
"""

from __future__ import annotations

import argparse
import os
import shutil

from testbed.console import require_root
from testbed.errors import CapabilityError, UsageError


def register(sub) -> None:
    parser = sub.add_parser("exec", help="run a command in a node of the running replica (testbed up)",
                            description=__doc__)
    parser.add_argument("node", metavar="NODE", help="node name (testbed ls --nodes lists them)")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command and its arguments")
    parser.set_defaults(func=_exec)


def _exec(args) -> int:
    from testbed.emu import session
    from testbed.emu.registry import same_process

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("CMD: give the command after `--`, e.g. `testbed exec h0 -- ip addr`")
    require_root("testbed exec")
    doc = session.require()
    node = session.node(doc, args.node)
    if not node.get("pid") or not same_process(int(node["pid"]), None):
        raise UsageError(f"NODE {args.node!r}: its shell (pid {node.get('pid')}) is gone; the replica is being "
                         "torn down or has crashed (`testbed ls`)")
    if shutil.which("nsenter") is None:
        raise CapabilityError("nsenter (util-linux) is missing: run `sudo make setup`")
    full = session.enter_argv(int(node["pid"]), session.substitute(argv, doc))
    os.execvp(full[0], full)
    return 127  # not reached
