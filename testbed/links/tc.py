"""tc command builders for the kernel backend (pure; Mininet's ``bwCmds`` manner, but returning argv lists).

Two shapes, both on the egress of one interface:

* rate only (no delay line needed, works on every kernel with HTB)::

      root htb 5:  --  class 5:1 rate R ceil R

* the full link, where the kernel has ``sch_netem`` (and ``sch_red`` for marking)::

      root netem 10: delay D [J] loss ... limit N     propagation delay and wire loss
        '-- tbf 20: rate R burst B limit L            the bottleneck (pacing)
              '-- red 30: min max probability ecn     the egress queue with RED/ECN (else tbf's bfifo)

  A constant delay before or after a FIFO gives the same departures shifted by D, so delaying first and
  queueing second models "queue, then wire" exactly (jitter aside).

* the full link, store and forward (``serialise``; no RED on this end)::

      root netem 10: delay D [J] loss ... rate R limit N

  tbf paces frames but hands each over whole at the start of its turn: the frame arrives one serialisation
  early. netem's ``rate`` holds each frame until its last bit has left (departure = max(previous departure,
  arrival + D) + size / R, the same as queue-then-wire), so a frame arrives as on a wire. netem's queue
  cannot mark, so an end with kernel RED keeps tbf's (the plan notes it).

netem counts every frame it holds against its one limit N: those on the wire, and (Debian 12's kernel, 6.1)
those waiting in its child qdisc. With tbf under it N is the queue's limit, so netem tail-drops before
RED's own limit is reached and every frame RED marks is delivered (the guest tests count marks against CE
at the receiver); frames on the wire share that limit. With ``rate`` (no child) N is the queue's limit
plus the delay line's full frames at the rate, so the wire's frames do not eat the queue.

Which backend a link gets is decided by :func:`testbed.plan.plan_replica`, from capabilities given as data.
"""

from __future__ import annotations

import math

from testbed.errors import SpecError
from testbed.links.model import BYTES, LinkParams, LossModel, RedParams

#: Average packet size assumed when converting packet thresholds to tc's byte thresholds.
AVPKT = 1514
#: tc cannot express rates below 8 kbit/s.
MIN_RATE_BPS = 8000


def _tc(netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns, "tc"] if netns else ["tc"]


def _rate(bps: float, field: str = "link.rate") -> str:
    if not bps or bps < MIN_RATE_BPS:
        raise SpecError(field, f"emulated rate {bps!r} bit/s is below tc's minimum of 8 kbit/s; "
                               "use a smaller time-dilation scale")
    return f"{int(round(bps))}bit"


def _us(seconds: float) -> str:
    return f"{int(round(seconds * 1e6))}us"


def _pct(p: float) -> str:
    return f"{p * 100:.6g}%"


def burst_bytes(rate_bps: float) -> int:
    """Token-bucket depth: ~1 ms at the rate, at least two full frames (so a frame always fits)."""
    return max(2 * AVPKT, int(rate_bps / 8 / 1000))


def htb_cmds(dev: str, rate_bps: float, netns: str | None = None, limit: int | None = None,
             limit_unit: str = "packets") -> list[list[str]]:
    """Rate only: HTB root with one class at ``rate_bps`` (ceil = rate, so no borrowing).

    With ``limit`` the class's queue is a ``pfifo`` of that many packets (``bfifo`` for bytes): the
    link's ``queue:`` or the switch's ``buffer:``. Without it the class keeps HTB's default leaf.
    """
    rate = _rate(rate_bps)
    burst = str(burst_bytes(rate_bps))
    tc = _tc(netns)
    cmds = [tc + ["qdisc", "replace", "dev", dev, "root", "handle", "5:", "htb", "default", "1"],
            tc + ["class", "replace", "dev", dev, "parent", "5:", "classid", "5:1", "htb", "rate", rate,
                  "ceil", rate, "burst", burst, "cburst", burst]]
    if limit is not None:
        if not limit >= 1:
            raise SpecError("link.queue", f"queue limit must be at least 1, got {limit!r}")
        fifo = "bfifo" if limit_unit == BYTES else "pfifo"
        cmds.append(tc + ["qdisc", "replace", "dev", dev, "parent", "5:1", "handle", "6:", fifo,
                          "limit", str(int(limit))])
    return cmds


#: gray loss on an HTB link end: frames a filter picks at random go to this class, whose queue holds none
GRAY_CLASS = "5:99"
#: the filter's priority under the HTB root (nothing else filters there)
GRAY_PRIO = "1"
#: classic BPF: ``ld rand`` (SKF_AD_OFF + SKF_AD_RANDOM), ``jgt #T`` -> pass, else ``ret #-1`` (the filter's
#: class: drop); ``ret #0`` is no match (the default class 5:1). P(rand <= T) = T / 2^32, the loss.
_GRAY_BPF = "4,32 0 0 4294963256,37 1 0 {threshold},6 0 0 4294967295,6 0 0 0"


def gray_cmds(dev: str, rate_bps: float, loss: float) -> list[list[str]]:
    """Gray loss on the egress of an HTB-shaped end (:func:`htb_cmds`): a fraction ``loss`` of its frames
    is dropped at random, carrier up, counted as drops of the gray class's queue (``tc -s qdisc``: a
    ``pfifo limit 0``). For machines without ``sch_netem``/``act_gact``: cls_bpf with a classic BPF program
    that draws the kernel's per-frame random number. ``loss`` 0 removes the filter (the class stays, unused).

    Raises:
        SpecError: ``loss`` outside 0..1.
    """
    if not 0.0 <= loss <= 1.0:
        raise SpecError("loss", f"gray loss must be a fraction 0..1, got {loss!r}")
    if loss == 0.0:
        return [["tc", "filter", "del", "dev", dev, "parent", "5:", "prio", GRAY_PRIO]]
    rate = _rate(rate_bps)
    threshold = min(round(loss * 2 ** 32), 2 ** 32 - 1)
    return [["tc", "class", "replace", "dev", dev, "parent", "5:", "classid", GRAY_CLASS, "htb", "rate", rate,
             "ceil", rate],
            ["tc", "qdisc", "replace", "dev", dev, "parent", GRAY_CLASS, "handle", "99:", "pfifo", "limit", "0"],
            ["tc", "filter", "replace", "dev", dev, "parent", "5:", "prio", GRAY_PRIO, "protocol", "all", "bpf",
             "bytecode", _GRAY_BPF.format(threshold=threshold), "classid", GRAY_CLASS]]


def tbf_cmd(dev: str, rate_bps: float, limit_bytes: float, parent: str | None = None, handle: str = "20:",
            netns: str | None = None) -> list[str]:
    """TBF at ``rate_bps`` with a queue of ``limit_bytes`` (at the root, or under ``parent``)."""
    where = ["parent", parent] if parent else ["root"]
    return _tc(netns) + ["qdisc", "replace", "dev", dev, *where, "handle", handle, "tbf", "rate", _rate(rate_bps),
                         "burst", str(burst_bytes(rate_bps)), "limit", str(int(limit_bytes))]


def loss_args(loss: LossModel | None) -> list[str]:
    """netem ``loss`` arguments: ``random P%`` or ``gemodel p r 1-h 1-k`` (percentages)."""
    if loss is None or not loss.active:
        return []
    if loss.kind == "random":
        return ["loss", "random", _pct(loss.rate)]
    return ["loss", "gemodel", _pct(loss.p), _pct(loss.r), _pct(loss.loss_bad), _pct(loss.loss_good)]


def netem_cmd(dev: str, params: LinkParams, parent: str | None = None, handle: str = "10:",
              netns: str | None = None, serialise: bool = False) -> list[str]:
    """netem with the delay, jitter, loss and limit of (emulated) ``params`` (see the module docstring);
    ``serialise``: netem's own ``rate`` serialises each frame at ``params.rate_bps``."""
    where = ["parent", parent] if parent else ["root"]
    argv = _tc(netns) + ["qdisc", "replace", "dev", dev, *where, "handle", handle, "netem"]
    delay = params.one_way_delay_s
    if delay or params.jitter_s:
        argv += ["delay", _us(delay)]
        if params.jitter_s:
            argv.append(_us(params.jitter_s))
    argv += loss_args(params.loss)
    if serialise:   # no child queue: netem's own holds the queue and the wire
        argv += ["rate", _rate(params.rate_bps), "limit", str(packet_limit(params) + in_flight_packets(params))]
    else:
        argv += ["limit", str(packet_limit(params))]
    return argv


def in_flight_packets(params: LinkParams) -> int:
    """Full frames on the wire of a link at its rate for its delay (0 without a rate): what netem holds
    beyond the queue."""
    if not params.rate_bps:
        return 0
    return int(math.ceil((params.one_way_delay_s + params.jitter_s) * params.rate_bps / (8 * AVPKT)))


def packet_limit(params: LinkParams) -> int:
    """Queue limit in packets (a byte limit is divided by a full frame, rounded up)."""
    limit, unit = params.queue_limit
    return int(math.ceil(limit / AVPKT)) if unit == BYTES else int(limit)


def byte_limit(params: LinkParams) -> int:
    """Queue limit in bytes (a packet limit times a full frame)."""
    limit, unit = params.queue_limit
    return int(limit) if unit == BYTES else int(limit) * AVPKT


def kernel_red_probability(p: float) -> float:
    """What to give tc for a curve that marks with probability ``p`` at ``kmax``: ``p / (2 - p)``.

    Linux RED spaces its marks uniformly (Floyd and Jacobson's ``count``: the gap since the last mark
    raises the probability), so at a configured ``q`` it marks a fraction ``2q / (1 + q)`` of the frames,
    not ``q`` (measured in the kernel guest, docs/vm.md: 0.51 where the curve said 0.34). ``q = p / (2 - p)``
    inverts that at ``kmax``; the curve is linear in the queue and the fraction nearly so, so below
    ``kmax`` the fraction stays within ~5 % of the curve (0.105 for 0.1 at half of pmax 0.2).
    """
    return p / (2 - p)


def red_cmd(dev: str, red: RedParams, rate_bps: float, limit_bytes: float, parent: str, handle: str = "30:",
            netns: str | None = None) -> list[str]:
    """RED with ECN marking (``ecn``) or early drop; thresholds in bytes (packets times 1514).

    Linux RED averages the queue (EWMA); ``burst`` is set to tc's recommended ``(2*min + max) / (3*avpkt)``
    (at least 1), which keeps the average close to the instantaneous queue DCQCN switches use. Its
    probability is :func:`kernel_red_probability` of the curve's: the kernel spaces marks uniformly.
    """
    scale = 1 if red.unit == BYTES else AVPKT
    kmin, kmax = int(red.kmin * scale), int(red.kmax * scale)
    if kmax <= kmin:
        kmax = kmin + 1  # tc needs max > min; a step curve
    burst = max(1, int((2 * kmin + kmax) / (3 * AVPKT)))
    limit = max(int(limit_bytes), kmax + AVPKT)
    argv = _tc(netns) + ["qdisc", "replace", "dev", dev, "parent", parent, "handle", handle, "red",
                         "limit", str(limit), "min", str(kmin), "max", str(kmax), "avpkt", str(AVPKT),
                         "burst", str(burst), "bandwidth", _rate(rate_bps), "probability", f"{kernel_red_probability(red.pmax):.6g}"]
    if red.ecn:
        argv.append("ecn")
    return argv


def serialises(params: LinkParams) -> bool:
    """Whether :func:`link_cmds` can serialise each frame of ``params`` (netem's ``rate``): a rate and
    no RED (kernel RED marks tbf's queue)."""
    return bool(params.rate_bps) and params.red is None


def link_cmds(dev: str, params: LinkParams, netns: str | None = None, serialise: bool = False
              ) -> list[list[str]]:
    """Commands emulating (emulated, already scaled) ``params`` on ``dev``'s egress with the kernel;
    ``serialise``: store and forward where :func:`serialises` (else tbf paces, as without it).

    Raises:
        SpecError: RED without a rate (no queue can form), or a rate below tc's minimum.
    """
    if params.red is not None and not params.rate_bps:
        raise SpecError("link.red", "RED marking needs a rate (a queue only forms at a bottleneck)")
    if not params.needs_delay_line:
        return htb_cmds(dev, params.rate_bps, netns) if params.rate_bps else []
    if serialise and serialises(params):
        return [netem_cmd(dev, params, netns=netns, serialise=True)]
    cmds = [netem_cmd(dev, params, netns=netns)]
    if params.rate_bps:
        cmds.append(tbf_cmd(dev, params.rate_bps, byte_limit(params), parent="10:1", netns=netns))
        if params.red is not None:
            cmds.append(red_cmd(dev, params.red, params.rate_bps, byte_limit(params), parent="20:1", netns=netns))
    return cmds


def clear_cmd(dev: str, netns: str | None = None) -> list[str]:
    """Remove the root qdisc (exit 2 when there is none: callers accept that)."""
    return _tc(netns) + ["qdisc", "del", "dev", dev, "root"]
