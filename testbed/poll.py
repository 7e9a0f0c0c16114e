"""The one way to wait: poll a condition until it holds or a timeout expires (never fixed sleeps).

:func:`sleep_until` is the other kind of wait, for schedules rather than readiness: an experiment that
cuts a link at t = 3 s, a sender pacing its packets. It is the only place that sleeps until a time.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def poll(condition: Callable[[], T], timeout: float, interval: float = 0.05, what: str = "condition") -> T:
    """Call ``condition`` until it returns a truthy value and return that value.

    Args:
        condition: callable returning a truthy value when ready (exceptions count as "not yet").
        timeout: seconds to wait at most.
        interval: seconds between tries (grows gently up to 10x for long waits).
        what: description used in the TimeoutError message.

    Raises:
        TimeoutError: naming ``what`` and the last exception seen, if any.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    delay = interval
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - a failing probe means "not ready yet"
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_exc})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, interval * 10)


def sleep_until(t: float, clock: Callable[[], float] = time.time) -> None:
    """Return at time ``t`` of ``clock`` (wall time by default; ``time.perf_counter`` for pacing).

    A schedule, not readiness: use :func:`poll` to wait for something to happen.
    """
    delay = t - clock()
    if delay > 0:
        time.sleep(delay)
