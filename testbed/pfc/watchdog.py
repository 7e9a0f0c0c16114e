"""The PFC watchdog: storm detection on a paused queue, then drop or ignore, then restoration.

A queue that is paused without a break for longer than the detection time while it holds frames is
either the victim of a PFC storm (a peer stuck sending PAUSE) or part of a deadlock; switches break both
the same way (SONiC ``pfcwd``, vendors' "PFC watchdog")::

       paused & queued ------ detect_s -----> STORM: action in force on that queue
                                                drop   -> frames of the queue are discarded (pfc_watchdog)
                                                ignore -> frames are sent despite PAUSE
       STORM & no PAUSE received for restore_s (counted from the storm's start at the earliest)
             -> OPERATIONAL again (PAUSE honoured)

Pure and clock-driven: the caller passes ``now`` and the queued bytes, and calls :meth:`PfcWatchdog.poll`
at :meth:`PfcWatchdog.next_deadline` (or on its own polling interval, as switches do). The watchdog acts
on a :class:`~testbed.pfc.state.PfcEgress` through its ``override`` slots, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.dilation import Dilation
from testbed.pfc.config import WatchdogParams
from testbed.pfc.state import PfcEgress

STORM, RESTORED = "storm", "restored"


@dataclass(frozen=True)
class WatchdogEvent:
    """A change of a queue's watchdog state (for the run's event log)."""

    now: float
    priority: int
    kind: str       # storm | restored
    action: str

    def as_dict(self) -> dict:
        return {"time": self.now, "priority": self.priority, "event": self.kind, "action": self.action}


class PfcWatchdog:
    """Storm detection for every lossless priority of one egress port.

    Args:
        params: detection and restoration times (real seconds) and the action.
        egress: the port's PFC egress state, whose ``override`` this watchdog sets.
        dilation: the replica's time dilation (the times are dilated like every timer).
    """

    def __init__(self, params: WatchdogParams, egress: PfcEgress, dilation: Dilation | None = None):
        self.params = params
        self.egress = egress
        d = dilation or egress.dilation
        self.detect = d.time(params.detect_s)
        self.restore = d.time(params.restore_s)
        self.in_storm = {p: False for p in egress.config.priorities}
        self.storm_since: dict = {p: None for p in egress.config.priorities}
        self.counters = {p: {"storms": 0, "restorations": 0, "storm_s": 0.0} for p in egress.config.priorities}
        self.events: list[WatchdogEvent] = []

    def poll(self, now: float, queued: dict) -> list[WatchdogEvent]:
        """Check every lossless priority at ``now``; ``queued`` = bytes waiting per priority.

        Returns:
            the state changes made at this poll.
        """
        e = self.egress
        out = []
        for p in e.config.priorities:
            if not self.in_storm[p]:
                since = e.paused_since[p]
                if (e.paused(now, p) and since is not None and queued.get(p, 0) > 0
                        and now - since >= self.detect):
                    self.in_storm[p] = True
                    self.storm_since[p] = now
                    e.override[p] = self.params.action
                    self.counters[p]["storms"] += 1
                    out.append(WatchdogEvent(now, p, STORM, self.params.action))
            else:
                last = self._quiet_since(p)
                if now - last >= self.restore:
                    self.in_storm[p] = False
                    self.counters[p]["storm_s"] += now - self.storm_since[p]
                    self.storm_since[p] = None
                    e.override[p] = None
                    self.counters[p]["restorations"] += 1
                    out.append(WatchdogEvent(now, p, RESTORED, self.params.action))
        self.events.extend(out)
        return out

    def next_deadline(self, now: float) -> float | None:
        """The earliest time after ``now`` a poll could change a state, or None.

        Detection also needs frames queued, which only the caller knows: poll again when a queue fills.
        """
        e = self.egress
        due = []
        for p in e.config.priorities:
            if self.in_storm[p]:
                due.append(self._quiet_since(p) + self.restore)
            elif e.paused(now, p) and e.paused_since[p] is not None:
                due.append(e.paused_since[p] + self.detect)
        due = [t for t in due if t > now]
        return min(due) if due else None

    def _quiet_since(self, p: int) -> float:
        """Start of the quiet time that ends a storm: the last PAUSE, or the storm's start if later."""
        last = self.egress.last_pause[p]
        return self.storm_since[p] if last is None or last < self.storm_since[p] else last

    def snapshot(self) -> dict:
        return {str(p): dict(c, in_storm=self.in_storm[p]) for p, c in self.counters.items()}
