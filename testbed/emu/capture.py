"""The one way a run captures frames: tcpdump started, waited for, and stopped only once its file settled.

Why one helper: a capture started before tcpdump says "listening on" misses the first frames, and one
interrupted while frames are still buffered loses them, so a validator or a ledger reading the pcap would
report losses (or a late first CNP) that never happened on the wire. The wire probes, the RoCE captures,
the PFC fan-in and the long-haul senders each had their own start/poll/stop loop; they now share this.

``spawn(argv, log)`` starts the command where it must run (a namespace, a Mininet host) and returns the
``Popen``: the caller knows its node, this module knows tcpdump.
"""

from __future__ import annotations

import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

from testbed.errors import EmulationError
from testbed.poll import poll

Spawn = Callable[[list, Path], subprocess.Popen]


def tcpdump_argv(intf: str, pcap: Path, expr: Sequence[str], *, snaplen: int = 0, buffer_kib: int = 32768,
                 nano: bool = False, direction: str | None = None, count: int | None = None) -> list[str]:
    """tcpdump writing the frames of ``intf`` matching ``expr`` into ``pcap``, each written at once (``-U``).

    ``snaplen`` 0 keeps whole frames; ``buffer_kib`` is the kernel capture buffer (a small one drops under a
    burst, counted by tcpdump as "dropped by kernel"); ``nano`` asks for nanosecond timestamps;
    ``direction`` ``in`` or ``out`` keeps only frames received or sent by ``intf`` (``-Q``); ``count``
    stops tcpdump after that many frames (``-c``: a bounded sample; :func:`tcpdump` then finds it exited).
    """
    argv = ["tcpdump", "-i", intf, "-n", "-U", "--immediate-mode", "-B", str(buffer_kib), "-s", str(snaplen)]
    if nano:
        argv += ["--time-stamp-precision", "nano"]
    if direction is not None:
        argv += ["-Q", direction]
    if count is not None:
        argv += ["-c", str(count)]
    return argv + ["-w", str(pcap), *expr]


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _pcap_of(argv: Sequence[str]) -> Path:
    return Path(argv[list(argv).index("-w") + 1])


@contextmanager
def tcpdump(spawn: Spawn, argv: list, log: Path, what: str, *, settle: bool = True,
            timeout: float = 20.0) -> Iterator[subprocess.Popen]:
    """Run tcpdump ``argv`` (from :func:`tcpdump_argv`) while the block runs; yields its process.

    Enters only once tcpdump listens (an :class:`EmulationError` with its log's last line if it exits
    first, or fails; one given a ``count`` may already be done, status 0). On leaving, with ``settle``, waits until the pcap has stopped growing (three equal sizes
    0.1 s apart, at most 30 s), then stops tcpdump with SIGINT so it flushes, and kills it if it hangs.
    """
    log = Path(log)
    log.unlink(missing_ok=True)
    pcap = _pcap_of(argv)
    proc = spawn(list(argv), log)
    try:
        poll(lambda: proc.poll() is not None or "listening on" in _text(log), timeout, 0.02,
             what=f"tcpdump on {what} to listen")
        if proc.poll() is not None and (proc.returncode != 0 or "listening on" not in _text(log)):
            last = (_text(log).strip().splitlines() or ["no output"])[-1]
            raise EmulationError(f"tcpdump on {what} exited with status {proc.returncode}: {last} (log {log})")
        yield proc
        if settle and proc.poll() is None:
            sizes: list[int] = []

            def settled() -> bool:
                sizes.append(pcap.stat().st_size if pcap.exists() else -1)
                return len(sizes) >= 3 and sizes[-1] == sizes[-2] == sizes[-3]
            poll(settled, 30, 0.1, what=f"{pcap.name} to stop growing")
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """SIGINT (tcpdump writes out what it holds), then SIGKILL if it has not exited within 10 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
