"""DCQCN congestion control (Zhu et al., SIGCOMM'15) as pure math: no clock, no sockets.

Both ends take ``now`` (seconds) as an argument, so the same objects run in the soft-RDMA data path,
in a simulator and in unit tests::

    sender (RP)                       switch                      receiver (NP)
    rate limiter R_C  --- data, ECT(0) --->  marks CE (RED) --->  CE seen: CNP to the sender QP,
          ^                                                        at most one per QP per interval
          '------------------------------ CNP (opcode 0x81) <-------'

Reaction point (RP), per QP:

* on CNP:  R_T = R_C;  R_C = R_C * (1 - alpha/2);  alpha = (1 - g) * alpha + g; timer and byte
  counter restart.
* alpha timer (55 us): a period without CNP decays alpha = (1 - g) * alpha.
* increase events, from the rate-increase timer (55 us) and from every byte counter's worth (10 MB)
  sent: T and BC count them since the last cut; with F = 5:
  fast recovery  (max(T, BC) < F):         R_C = (R_T + R_C) / 2
  additive       (otherwise):              R_T += R_AI;  R_C = (R_T + R_C) / 2
  hyper          (min(T, BC) >= F):        R_T += i * R_HAI, i = min(T, BC) - F + 1;  R_C = (R_T + R_C) / 2

Defaults are the paper's as used by the HPCC ns-3 simulator (``--cc dcqcn_paper``): g = 1/256,
CNP interval 50 us, alpha and rate-increase timers 55 us, byte counter 10 MB, F = 5; R_AI and R_HAI
are 40 and 100 Mb/s per 100 Gb/s of line rate (the simulator's 10 and 25 Mb/s per 25G). Every time
constant is multiplied by the replica's dilation factor and every rate divided by it
(:meth:`DcqcnParams.dilated`); the byte counter stays in bytes (see :mod:`testbed.dilation`).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, field, replace

from testbed.dilation import Dilation
from testbed.errors import SpecError


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN constants; rates in bit/s, times in seconds, byte counter in bytes."""

    line_rate: float
    g: float = 1 / 256
    alpha_timer: float = 55e-6
    rate_increase_timer: float = 55e-6
    byte_counter: float = 10e6
    fast_recovery_rounds: int = 5
    rate_ai: float | None = None      # default line_rate * 4e-4  (40 Mb/s per 100G)
    rate_hai: float | None = None     # default line_rate * 1e-3  (100 Mb/s per 100G)
    min_rate: float | None = None     # default line_rate * 1e-3
    cnp_interval: float = 50e-6
    initial_alpha: float = 1.0

    def __post_init__(self):
        for name in ("line_rate", "alpha_timer", "rate_increase_timer", "byte_counter", "cnp_interval"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise SpecError(f"dcqcn.{name}", f"must be a positive number, got {value!r}")
        if not 0 < self.g < 1:
            raise SpecError("dcqcn.g", f"must be in (0, 1), got {self.g!r}")
        if not 0 <= self.initial_alpha <= 1:
            raise SpecError("dcqcn.initial_alpha", f"must be in [0, 1], got {self.initial_alpha!r}")
        if not (isinstance(self.fast_recovery_rounds, int) and self.fast_recovery_rounds >= 1):
            raise SpecError("dcqcn.fast_recovery_rounds", f"must be an integer >= 1, got "
                                                          f"{self.fast_recovery_rounds!r}")
        defaults = {"rate_ai": 4e-4, "rate_hai": 1e-3, "min_rate": 1e-3}
        for name, share in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, self.line_rate * share)
            elif not getattr(self, name) > 0:
                raise SpecError(f"dcqcn.{name}", f"must be positive, got {getattr(self, name)!r}")

    def dilated(self, dilation: Dilation) -> "DcqcnParams":
        """The constants of a replica running ``dilation.scale`` times slower than the real fabric.

        ``self`` holds the real-fabric values; rates are divided, timers and intervals multiplied.
        """
        return replace(self, line_rate=dilation.rate(self.line_rate),
                       alpha_timer=dilation.time(self.alpha_timer),
                       rate_increase_timer=dilation.time(self.rate_increase_timer),
                       cnp_interval=dilation.time(self.cnp_interval),
                       rate_ai=dilation.rate(self.rate_ai), rate_hai=dilation.rate(self.rate_hai),
                       min_rate=dilation.rate(self.min_rate))


class ReactionPoint:
    """The sender-side rate limiter of one QP.

    Call :meth:`advance` with the current time before using :attr:`rate`, :meth:`on_cnp` for each CNP
    received and :meth:`on_sent` for the bytes sent.
    """

    def __init__(self, params: DcqcnParams, now: float = 0.0):
        self.p = params
        self.rate = params.line_rate        # R_C, current rate
        self.target = params.line_rate      # R_T, target rate
        self.alpha = params.initial_alpha
        self.timer_rounds = 0               # T
        self.byte_rounds = 0                # BC
        self.bytes_since = 0.0
        self.cnps = 0
        self.increases = 0
        self._alpha_due = now + params.alpha_timer
        self._increase_due = now + params.rate_increase_timer

    def on_cnp(self, now: float) -> None:
        """Cut the rate and raise alpha (the CNP carries no data: its arrival is the signal)."""
        self.advance(now)
        self.cnps += 1
        self.target = self.rate
        self.rate = max(self.p.min_rate, self.rate * (1 - self.alpha / 2))
        self.alpha = (1 - self.p.g) * self.alpha + self.p.g
        self.timer_rounds = self.byte_rounds = 0
        self.bytes_since = 0.0
        self._alpha_due = now + self.p.alpha_timer
        self._increase_due = now + self.p.rate_increase_timer

    def on_sent(self, nbytes: int, now: float) -> None:
        """Count sent bytes; each full byte counter is an increase event."""
        self.bytes_since += nbytes
        while self.bytes_since >= self.p.byte_counter:
            self.bytes_since -= self.p.byte_counter
            self.byte_rounds += 1
            self._increase()

    def advance(self, now: float) -> None:
        """Run the alpha and rate-increase timers up to ``now``."""
        while self._alpha_due <= now:  # each CNP restarts this timer: an expiry = a period without CNP
            self.alpha *= 1 - self.p.g
            self._alpha_due += self.p.alpha_timer
        while self._increase_due <= now:
            self.timer_rounds += 1
            self._increase()
            self._increase_due += self.p.rate_increase_timer

    def _increase(self) -> None:
        f = self.p.fast_recovery_rounds
        t, bc = self.timer_rounds, self.byte_rounds
        if max(t, bc) < f:
            pass  # fast recovery: towards the rate before the cut
        elif min(t, bc) >= f:
            self.target += (min(t, bc) - f + 1) * self.p.rate_hai
        else:
            self.target += self.p.rate_ai
        self.target = min(self.target, self.p.line_rate)
        self.rate = min((self.target + self.rate) / 2, self.p.line_rate)
        self.increases += 1


class NotificationPoint:
    """The receiver side: CE-marked packet -> CNP to the sender's QP, at most one per QP per interval."""

    def __init__(self, params: DcqcnParams):
        self.interval = params.cnp_interval
        self._last: dict[int, float] = {}
        self.cnps_sent = 0
        self.ce_seen = 0

    def on_ce(self, sender_qpn: int, now: float) -> bool:
        """Record a CE mark; True when a CNP should go to ``sender_qpn`` now."""
        self.ce_seen += 1
        last = self._last.get(sender_qpn)
        if last is not None and now - last < self.interval:
            return False
        self._last[sender_qpn] = now
        self.cnps_sent += 1
        return True


@dataclass
class TimeSeries:
    """Per-QP samples for plots: time, rate, target, alpha, CNPs received/sent, retransmissions and the
    payload bytes acknowledged so far (its slope is the goodput)."""

    qpn: int
    rows: list[dict] = field(default_factory=list)

    COLUMNS = ("t", "rate_bps", "target_bps", "alpha", "cnps_rx", "cnps_tx", "retransmissions", "acked_bytes")

    def sample(self, now: float, rp: ReactionPoint | None, cnps_tx: int = 0, retransmissions: int = 0,
               acked_bytes: int = 0) -> None:
        self.rows.append({"t": now, "rate_bps": rp.rate if rp else None, "target_bps": rp.target if rp else None,
                          "alpha": rp.alpha if rp else None, "cnps_rx": rp.cnps if rp else 0,
                          "cnps_tx": cnps_tx, "retransmissions": retransmissions, "acked_bytes": acked_bytes})

    def to_json(self) -> dict:
        return {"qpn": self.qpn, "columns": list(self.COLUMNS),
                "rows": [[row[c] for c in self.COLUMNS] for row in self.rows]}

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.COLUMNS)
        writer.writeheader()
        writer.writerows(self.rows)
        return out.getvalue()


def params_dict(params: DcqcnParams) -> dict:
    return asdict(params)
