"""Keep BMv2's Thrift server on loopback.

``simple_switch`` binds its Thrift port to every interface and has no option to change that, while the
testbed promises that nothing it starts listens beyond 127.0.0.1. A tiny ``LD_PRELOAD`` shim
(``testbed/data/bind_loopback.c``) rewrites wildcard TCP binds to loopback; it is compiled on first use
with the system C compiler and cached by source hash next to the compiled P4 programs.

Where no C compiler exists the switch still starts, and a warning says its Thrift port is reachable
from the network (``TESTBED_BMV2_ANY_ADDR=1`` accepts that silently).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from testbed.console import console
from testbed.p4rt.compile import cache_dir

SOURCE = Path(__file__).resolve().parent.parent / "data" / "bind_loopback.c"


def shim_path() -> Path:
    key = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return cache_dir() / f"bind-loopback-{key}.so"


def preload_library() -> Path | None:
    """The compiled shim (built if needed), or None when it cannot be built (warned once)."""
    out = shim_path()
    if out.exists():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        if not os.environ.get("TESTBED_BMV2_ANY_ADDR"):
            console.print("[yellow]warning: no C compiler, so BMv2's Thrift port listens on every "
                          "interface (install gcc to keep it on 127.0.0.1)[/yellow]")
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SOURCE), "-ldl"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        console.print(f"[yellow]warning: could not build {SOURCE.name} ({res.stderr.strip()[:200]}); "
                      "BMv2's Thrift port listens on every interface[/yellow]")
        return None
    os.replace(tmp, out)
    return out


def loopback_env(base: dict | None = None) -> dict:
    """Environment for a ``simple_switch`` process with the shim preloaded (when available)."""
    env = dict(os.environ if base is None else base)
    lib = preload_library()
    if lib is not None:
        env["LD_PRELOAD"] = f"{lib} {env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else str(lib)
    return env
