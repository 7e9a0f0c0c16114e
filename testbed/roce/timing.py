"""When did RoCE packets of some opcode appear in a capture? (feedback delay, CNP arrivals over time)."""

from __future__ import annotations

from pathlib import Path

from testbed.roce.capture import Malformed, read_records, roce_of
from testbed.roce.opcodes import CNP


def first_opcode_time(pcap: Path, opcode: int = CNP) -> tuple[float | None, str | None]:
    """(capture time of the first RoCEv2 packet whose BTH opcode is ``opcode``, None) or (None, why not).

    A capture cut short when its tcpdump was stopped is read up to where it ends.
    """
    times, why = opcode_times(pcap, opcode)
    return (times[0], None) if times else (None, why)


def _packets(records, opcode: int | None):
    """(record, RoCEv2 packet) of ``records`` whose BTH opcode is ``opcode`` (every one with None); raises
    :class:`Malformed` at a malformed record, as :func:`roce_of` does."""
    for rec in records:
        pkt = roce_of(rec)
        if pkt is not None and pkt.transport and opcode in (None, pkt.transport[0]):
            yield rec, pkt


def opcode_times(pcap: Path, opcode: int | None = CNP, ce: bool = False,
                 to: frozenset | None = None) -> tuple[list[float], str | None]:
    """(capture times of every RoCEv2 packet whose BTH opcode is ``opcode``, or of every one with None,
    only those marked CE with ``ce``, only those addressed to an IP in ``to`` when given; None) or (those
    read, why not all): a malformed record ends the list and says where."""
    records, info = read_records(pcap)
    times = []
    try:
        for rec, pkt in _packets(records, opcode):
            if (not ce or pkt.ecn == 3) and (to is None or pkt.dst in to):
                times.append(rec.ts)
    except Malformed as exc:
        return times, f"capture {pcap}: {exc}"
    return times, ("capture truncated" if info.get("truncated_file") else None)


def destinations(pcap: Path, opcode: int | None = CNP) -> frozenset:
    """The destination IPs of the capture's RoCEv2 packets with ``opcode`` (every one with None), as far as
    the capture reads."""
    out = set()
    try:
        for _rec, pkt in _packets(read_records(pcap)[0], opcode):
            out.add(pkt.dst)
    except Malformed:
        pass
    return frozenset(out)
