"""A bounded sample of one DCQCN endpoint's RoCEv2 traffic, checked as ``roce check --expect-ect --cut-at N``
(no root: reads the pcap). The testbed's own DCQCN scenarios (``long_haul_cnp``'s trials, ``collective``'s
sweep) each capture one at a host link with the one tcpdump helper (:mod:`testbed.emu.capture`,
``count=DATA_SAMPLE_FRAMES``, :data:`ROCE_FILTER`, both directions, whole frames) and record the verdict
as ``data_check``::

    check_sample(pcap, cnp_interval_s, retx_gap_s)   the check, as data_verdict
    data_verdict(report, capture, error)             a check_capture report as a run's ``data_check``
    retx_gap_for(scale, qp_timeout_s)                the dilated resend gap a sample is judged at
    sample_line(check)                               the verdict in one line, for the console

What a sample that bounded can and cannot show (``roce check``'s defaults otherwise, none weakened): it may
end inside a message (``cut_at``: counted as ``open_at_end``); a hole or a duplicate inside it is still a
violation; its first PSN is the QP's initial one, never assumed 0; both directions, so the NAKs that
explain a go-back-N resend and the CNPs the endpoint got (format, spacing against the emulated CNP
interval) are in it. Every time is dilated: the CNP interval is the plan's emulated one, and the resend
gap (the idle time that explains a resend as a timeout) the real one x scale, or every frame gap of a
slowed link would excuse a duplicate.
"""

from __future__ import annotations

from pathlib import Path

from testbed.errors import UsageError
from testbed.roce.check import RETX_GAP_S, check_capture, failures

#: tcpdump filter of every RoCEv2 frame (data, ACKs, NAKs, CNPs: all go to UDP port 4791).
ROCE_FILTER = "udp dst port 4791"
#: Frames of a data sample, whole (the ICRC covers every byte): ~1.6 MB of pcap.
DATA_SAMPLE_FRAMES = 1500
#: Violations a ``data_check`` lists (the count is complete).
FIRST_VIOLATIONS = 3


def retx_gap_for(scale: float, qp_timeout_s: float | None = None) -> float:
    """The resend gap a sample is judged at: ``roce check``'s 1 ms x ``scale``, but never above the QP's
    own timeout (``qp_timeout_s``, seconds as run): a resend after a timeout that fired sooner than the
    dilated gap is explained by that timeout, not a duplicate."""
    gap = RETX_GAP_S * scale
    return gap if qp_timeout_s is None else min(gap, qp_timeout_s)


def check_sample(pcap: Path, cnp_interval_s: float, retx_gap_s: float, frames: int = DATA_SAMPLE_FRAMES) -> dict:
    """``roce check --expect-ect --cut-at frames`` of ``pcap``, as :func:`data_verdict`; ``cnp_interval_s``:
    the emulated CNP interval, ``retx_gap_s``: :func:`retx_gap_for`."""
    pcap = Path(pcap)
    try:
        report = check_capture(pcap, cnp_interval=cnp_interval_s, require_ect=True, retx_gap=retx_gap_s,
                               cut_at=frames)
    except UsageError as exc:   # no file, or not a capture: the check did not run, which fails it
        return data_verdict(None, pcap.name, str(exc))
    return data_verdict(report, pcap.name)


def data_verdict(report: dict | None, capture: str, error: str | None = None) -> dict:
    """A run's ``data_check`` from a :func:`testbed.roce.check.check_capture` report (pure).

    ``ok`` only when the sample holds the endpoint's data, all of it ECN-capable, and passes ``roce check``
    with its defaults (:func:`testbed.roce.check.failures`: no violation, bad ICRC, malformed packet or
    corrupt file); ``reasons`` say why not, the first violation quoted. ``report`` None: the check could
    not run (``error``), which fails it too.
    """
    if report is None:
        return {"capture": capture, "packets": 0, "data_packets": 0, "ect": False, "violations": 0,
                "first_violations": [], "ok": False, "reasons": [f"not checked: {error}"]}
    qps = report["qps"]
    data = sum(q["requests"] + q["read_responses"] for q in qps)
    not_ect = sum(q["not_ect"] for q in qps)
    reasons = failures(report)
    if report["violation_count"] and report["violations"]:   # failures() names the violations first
        v = report["violations"][0]
        reasons[0] += f" (first: {v['qp']}" + (f" PSN {v['psn']}" if v["psn"] is not None else "") + f": {v['what']})"
    if report["roce_packets"] and not data:
        reasons.append("no data packet in the sample")
    return {"capture": capture, "packets": report["roce_packets"], "data_packets": data,
            "ect": bool(data) and not not_ect, "not_ect": not_ect,
            "ce_marked": sum(q["ce_marked"] for q in qps), "cnps": report["cnp"],
            "retransmissions": sum(q["retransmissions"] for q in qps), "cut": report["cut"],
            "open_at_end": report["open_at_end"], "violations": report["violation_count"],
            "first_violations": report["violations"][:FIRST_VIOLATIONS], "ok": not reasons, "reasons": reasons}


def sample_line(check: dict) -> str:
    """A ``data_check`` in one line: what ``roce check --expect-ect`` saw, then ok or FAIL with the reasons."""
    head = f"data sample {check['capture']}: {check['packets']} frames, {check['data_packets']} data"
    if check["packets"]:
        head += (f" ({'all ECT' if check['ect'] else str(check.get('not_ect', 0)) + ' Not-ECT'}), "
                 f"{check.get('cnps', 0)} CNPs, {check['violations']} violations")
    return f"{head}: " + ("roce check --expect-ect ok" if check["ok"] else "FAIL: " + "; ".join(check["reasons"]))
