"""Signals that must not leave a half-built replica behind.

* SIGINT already raises KeyboardInterrupt; :func:`terminate_raises` makes SIGTERM raise
  :class:`Terminated` (a KeyboardInterrupt) too, so ``with`` blocks unwind and tear down.
* While tearing down, :func:`deferred_signals` holds SIGINT/SIGTERM back (a second Ctrl-C would
  otherwise abort the cleanup half-way) and re-raises one afterwards if nothing else is propagating.

Handlers can only be installed from the main thread; elsewhere both are no-ops.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_terminated(signum, frame):
    raise Terminated(f"signal {signum}")


class terminate_raises:
    """Context manager: SIGTERM raises :class:`Terminated` inside the block (restored afterwards)."""

    def __init__(self):
        self._previous = None

    def __enter__(self):
        if _main_thread():
            self._previous = signal.signal(signal.SIGTERM, _raise_terminated)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        return False


_depth = 0


@contextmanager
def deferred_signals():
    """Hold SIGINT and SIGTERM until the block ends; re-raise one then (unless already unwinding)."""
    global _depth
    if not _main_thread():
        yield
        return
    received: list[int] = []
    previous = {}
    if _depth == 0:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, frame: received.append(signum))
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received and sys.exc_info()[0] is None:
            if received[0] == signal.SIGTERM:
                raise Terminated(f"signal {received[0]}")
            raise KeyboardInterrupt
