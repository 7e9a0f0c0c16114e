"""Signals that must not leave a half-built replica behind.

* SIGINT already raises KeyboardInterrupt; :func:`terminate_raises` makes SIGTERM and SIGHUP (the
  terminal was closed) raise :class:`Terminated` (a KeyboardInterrupt) too, so ``with`` blocks unwind and
  tear down. Left at its default, SIGHUP would kill the process and leave the whole replica behind.
* While tearing down, :func:`deferred_signals` holds SIGINT/SIGTERM/SIGHUP back (a second Ctrl-C would
  otherwise abort the cleanup half-way) and re-raises one afterwards if nothing else is propagating.

Handlers can only be installed from the main thread; elsewhere both are no-ops.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

#: Signals that end a run with a full teardown (SIGINT is Python's KeyboardInterrupt already).
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM or SIGHUP; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_terminated(signum, frame):
    raise Terminated(signum)


class terminate_raises:
    """Context manager: SIGTERM and SIGHUP raise :class:`Terminated` inside the block (restored
    afterwards). A SIGHUP that was ignored on entry (``nohup``) stays ignored."""

    def __init__(self):
        self._previous: dict = {}

    def __enter__(self):
        if _main_thread():
            for sig in TERMINATING:
                if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                    continue
                self._previous[sig] = signal.signal(sig, _raise_terminated)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        return False


_depth = 0


@contextmanager
def deferred_signals():
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends; re-raise one then (unless already unwinding)."""
    global _depth
    if not _main_thread():
        yield
        return
    received: list[int] = []
    previous = {}
    if _depth == 0:
        for sig in (signal.SIGINT, *TERMINATING):
            if signal.getsignal(sig) == signal.SIG_IGN:
                continue
            previous[sig] = signal.signal(sig, lambda signum, frame: received.append(signum))
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received and sys.exc_info()[0] is None:
            if received[0] in TERMINATING:
                raise Terminated(received[0])
            raise KeyboardInterrupt
