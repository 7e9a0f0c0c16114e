"""BMv2's receive path, measured and sized: the ``bmv2_rx`` shim (``testbed/data/bmv2_rx.c``).

BMv2 reads its ports through libpcap's capture ring and never reads that ring's drop counter, so a
switch that falls behind (a loaded machine deschedules it) loses frames that no counter anywhere shows:
the kernel counts them only in PACKET_STATISTICS of BMv2's own sockets. Measured in the long-haul
scenario: every loss the receivers NAKed that no switch counted was missing between a switch's
interface counter and its ingress pipeline (:mod:`testbed.links.hops`). The shim, preloaded into
``simple_switch`` next to the loopback one, sizes each port's ring (``RX_BUFFER_BYTES``) and writes the
rings' counters to ``<log_dir>/<switch>-rx.json`` every 100 ms, so those frames are counted by place::

    {"buffer_bytes": N, "ports": {"x0-eth1": {"recv": R, "drop": D, "ifdrop": I}, ...}}

:func:`rx_env` is the environment (the shim is built on first use with the system C compiler and cached
by source hash, as the loopback shim; without a compiler the switch runs with libpcap's defaults and
:func:`read_rx_stats` returns None, which the ledger reports as "not measured").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from testbed.p4rt.compile import cache_dir

SOURCE = Path(__file__).resolve().parent.parent / "data" / "bmv2_rx.c"
#: Bytes of capture ring per port (libpcap's default is 2 MiB); about 8000 RoCE frames of 1 KB.
RX_BUFFER_BYTES = 16 << 20


def shim_path() -> Path:
    key = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return cache_dir() / f"bmv2-rx-{key}.so"


def build() -> Path | None:
    """The compiled shim (built if needed), or None when there is no working C compiler."""
    out = shim_path()
    if out.exists():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SOURCE), "-ldl", "-lpthread"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        return None
    os.replace(tmp, out)
    return out


def rx_env(env: dict, stats_path: Path, buffer_bytes: int | None = None) -> dict:
    """``env`` with the shim preloaded (when it builds), its ring size and its stats file.

    ``buffer_bytes``: None -> ``$TESTBED_BMV2_RX_BUFFER`` or :data:`RX_BUFFER_BYTES`; 0 -> libpcap's default
    (to measure what the default loses).
    """
    if buffer_bytes is None:
        buffer_bytes = int(env.get("TESTBED_BMV2_RX_BUFFER") or RX_BUFFER_BYTES)
    lib = build()
    if lib is None:
        return env
    out = dict(env)
    out["LD_PRELOAD"] = f"{out['LD_PRELOAD']} {lib}" if out.get("LD_PRELOAD") else str(lib)
    out["TESTBED_BMV2_RX_BUFFER"] = str(int(buffer_bytes))
    out["TESTBED_BMV2_RX_STATS"] = str(stats_path)
    return out


def read_rx_stats(path: Path) -> dict | None:
    """The shim's latest document, or None (no shim, or not written yet)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def ring_frames(doc: dict | None) -> int | None:
    """The fewest frames any port's ring holds (None when not measured, or from a shim too old to say):
    libpcap sizes ring slots for 64 KiB super-frames on a port with TSO/GSO on, which shrank the ring
    from ~10000 frames to 256."""
    frames = [int(p["frames"]) for p in (doc or {}).get("ports", {}).values() if p.get("frames")]
    return min(frames) if frames else None


def ring_drops(before: dict | None, after: dict | None) -> dict | None:
    """{port interface: frames the ring dropped between two documents} (None when not measured)."""
    if after is None:
        return None
    b = (before or {}).get("ports", {})
    return {name: int(p.get("drop", 0)) - int(b.get(name, {}).get("drop", 0)) for name, p in after["ports"].items()}
