"""Runtime impairment of a running link node: the control file both cores read on SIGUSR2 (pure).

A gray failure is a link that starts losing part of what crosses it while its carrier stays up. To
emulate one, the loss of a running link node changes without a restart, so its counters (every drop
attributed: ``drop_loss``) and the frames in flight are kept::

    glue (testbed.links.wire.set_link_loss)                     link node (linkcore.c / delayline.py)
      write <stats>.ctl:  seq N / loss a>b random,0.1   --SIGUSR2-->  read it, apply all of it or none
      poll the stats file until control_seq == N        <--stats--   rewrite stats: control_seq, control_error,
                                                                     loss_rate_now per direction

The file lives next to the stats file (nothing listens on the network). Only random (Bernoulli) loss is
set at runtime; ``none`` (rate 0) turns loss off. ``a>b`` is the direction from the link's ``u`` end
(port 1 of the node) to its ``v`` end.
"""

from __future__ import annotations

import os
from pathlib import Path

DIRECTIONS = ("a>b", "b>a")


def control_path(stats_path: str | os.PathLike) -> Path:
    """The control file of the link node writing ``stats_path``."""
    return Path(str(stats_path) + ".ctl")


def render_control(seq: int, rates: dict) -> str:
    """The control file asking for ``rates`` (``{"a>b": 0.1, "b>a": 0.0}``; a missing direction is kept).

    Raises:
        ValueError: an unknown direction or a rate outside 0..1.
    """
    if seq < 1:
        raise ValueError(f"control seq must be >= 1, got {seq}")
    lines = [f"seq {int(seq)}"]
    for d, rate in rates.items():
        if d not in DIRECTIONS:
            raise ValueError(f"unknown direction {d!r}; allowed: {', '.join(DIRECTIONS)}")
        rate = float(rate)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"loss of {d} must be between 0 and 1, got {rate!r}")
        lines.append(f"loss {d} " + ("none" if rate == 0 else f"random,{rate!r}"))
    return "\n".join(lines) + "\n"


def parse_control(text: str) -> tuple[int, dict]:
    """``(seq, {direction: rate})`` of a control file (what ``control.c`` accepts, for the Python line).

    Raises:
        ValueError: a line that is not ``seq N`` or ``loss a>b|b>a|both none|random,RATE`` (RATE in 0..1),
            or no ``seq`` line.
    """
    seq, rates = None, {}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "seq" and len(words) == 2 and words[1].isdigit():
            seq = int(words[1])
            continue
        if words[0] != "loss" or len(words) != 3:
            raise ValueError("unknown control line (expected seq N or loss DIR MODEL)")
        d, model = words[1], words[2]
        if d not in (*DIRECTIONS, "both"):
            raise ValueError("loss: direction a>b, b>a or both")
        rate = 0.0 if model == "none" else _random_rate(model)
        for x in (DIRECTIONS if d == "both" else (d,)):
            rates[x] = rate
    if seq is None:
        raise ValueError("no seq line")
    return seq, rates


def seq_of(text: str) -> int:
    """The ``seq`` of a control file even when another line is bad (0: none), so a refusal is acknowledged."""
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "seq" and words[1].isdigit():
            return int(words[1])
    return 0


def _random_rate(model: str) -> float:
    kind, _, value = model.partition(",")
    try:
        rate = float(value)
    except ValueError:
        rate = -1.0
    if kind != "random" or not 0.0 <= rate <= 1.0:
        raise ValueError("loss: none or random,RATE with RATE in 0..1")
    return rate


def acknowledged(stats: dict | None, seq: int) -> bool:
    """The link node has read control request ``seq`` (applied, or refused with ``control_error``)."""
    return stats is not None and int(stats.get("control_seq", 0)) >= seq
