"""When did a RoCE packet of some opcode first appear in a capture? (feedback-delay measurements)."""

from __future__ import annotations

from pathlib import Path

from testbed.roce.capture import Malformed, read_records, roce_of
from testbed.roce.opcodes import CNP


def first_opcode_time(pcap: Path, opcode: int = CNP) -> tuple[float | None, str | None]:
    """(capture time of the first RoCEv2 packet whose BTH opcode is ``opcode``, None) or (None, why not).

    A capture cut short when its tcpdump was stopped is read up to where it ends.
    """
    records, info = read_records(pcap)
    try:
        for rec in records:
            pkt = roce_of(rec)
            if pkt is not None and pkt.transport and pkt.transport[0] == opcode:
                return rec.ts, None
    except Malformed as exc:
        return None, f"capture {pcap}: {exc}"
    return None, ("capture truncated" if info.get("truncated_file") else None)
