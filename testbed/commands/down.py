"""``sudo testbed down [--timeout S]``: tear down the replica ``testbed up`` keeps up, from any terminal.

It asks the ``testbed up`` process to stop (SIGTERM, checked by its start time so a reused pid is never
signalled) and waits until that process has removed everything it built; it never removes objects itself
while their owner is alive. If the owner died (SIGKILL), ``sudo testbed clean`` removes its leftovers.
"""

from __future__ import annotations

import os
import signal

from testbed.console import console, require_root
from testbed.errors import EmulationError


def register(sub) -> None:
    parser = sub.add_parser("down", help="tear down the running replica (testbed up)", description=__doc__)
    parser.add_argument("--timeout", type=float, default=900, metavar="S",
                        help="seconds to wait for the teardown (default 900)")
    parser.set_defaults(func=_down)


def _down(args) -> int:
    from testbed.emu import session
    from testbed.emu.registry import is_running, load_runs
    from testbed.poll import poll

    require_root("testbed down")
    doc = session.require()
    pid, start = int(doc["pid"]), doc.get("start")
    console.print(f"stopping replica {doc['name']!r} (testbed up, pid {pid})")
    os.kill(pid, signal.SIGTERM)
    try:
        poll(lambda: not is_running(pid, start), timeout=args.timeout, interval=0.1,
             what=f"testbed up (pid {pid}) to tear the replica down")
    except TimeoutError:
        raise EmulationError(f"the replica (pid {pid}) is still tearing down after {args.timeout:g}s; "
                             "wait, or `testbed ls` to see it") from None
    left = [r for r in load_runs() if r.get("run_id") == doc.get("run_id")]
    if left:
        raise EmulationError(f"replica {doc['name']!r} stopped but left {len(left[0].get('objects', []))} objects; "
                             "run `sudo testbed clean`")
    console.print(f"replica {doc['name']!r} is down; nothing left behind")
    return 0
