"""The aggregation packet, exactly as ``p4/aggregation.p4`` parses it (pure; no sockets).

    Ethernet / IPv4 / UDP dst 48864 / agg header (12 B) / ELEMS x int32 (network order)

    agg header:  job(8) worker(8) flags(8) exponent(8) | pool_index(16) count(16) | seq(32)
                 pool_index = shadow << 15 | slot (job-relative)
                 exponent   = biased by 128 (unsigned compare in the switch is a signed max)

The UDP payload (header + elements) is what the worker library sends through a UDP socket; the kernel adds
Ethernet/IP/UDP. The switch answers with the same layout and :data:`FLAG_RESULT` set.

Why 256 elements (1 KB, SwitchML's large-payload mode): BMv2's cost per packet is high and its cost per
element lower, so larger packets aggregate at least as many bytes per second (``testbed bench agg``:
64 elements ~9 kpps / 18.7 Mbit/s, 256 elements 2.5-3.5 kpps / 21-29 Mbit/s summed on the 2-core dev
machine) and the 54 B of headers are 5 % of the frame instead of 17 %, which matters when links are the
bottleneck.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import numpy as np

from testbed.errors import SpecError

#: UDP port of aggregation packets (SwitchML's 0xBEE0).
AGG_PORT = 48864
#: int32 elements per packet; must match AGG_ELEMS of the compiled P4 program.
ELEMS = 256
#: Logical slots in the switch's pool (POOL_SLOTS in the P4 program); each has a shadow copy.
POOL_SLOTS = 1024
#: Workers per job (bitmap width).
MAX_WORKERS = 32

FLAG_RESULT = 0x01
FLAG_SPILL = 0x02

EXP_BIAS = 128
SHADOW_BIT = 0x8000

_HDR = struct.Struct("!BBBBHHI")
HEADER_BYTES = _HDR.size
#: Bytes on the wire per aggregation packet (Ethernet 14 + IPv4 20 + UDP 8 + agg header + data).
FRAME_BYTES = 14 + 20 + 8 + HEADER_BYTES + 4 * ELEMS
PAYLOAD_BYTES = HEADER_BYTES + 4 * ELEMS


class Stat(enum.IntEnum):
    """Indices of the switch's ``stats`` counter (ST_* in the P4 program)."""

    CONTRIB = 0
    COMPLETE = 1
    DUPLICATE = 2
    SHADOW = 3
    SPILL = 4
    BAD_JOB = 5
    BAD_INDEX = 6
    BAD_COUNT = 7
    BAD_WORKER = 8
    BAD_FLAGS = 9


@dataclass(frozen=True)
class AggHeader:
    job: int
    worker: int
    slot: int
    shadow: int
    seq: int
    flags: int = 0
    exponent: int = 0          # unbiased, -128..127
    count: int = ELEMS

    @property
    def pool_index(self) -> int:
        return (SHADOW_BIT if self.shadow else 0) | self.slot

    @property
    def is_result(self) -> bool:
        return bool(self.flags & FLAG_RESULT)

    def pack(self) -> bytes:
        for name, value, hi in (("job", self.job, 255), ("worker", self.worker, 255),
                                ("slot", self.slot, SHADOW_BIT - 1), ("seq", self.seq, 2 ** 32 - 1),
                                ("flags", self.flags, 255), ("count", self.count, 2 ** 16 - 1)):
            if not 0 <= value <= hi:
                raise SpecError(f"agg.{name}", f"must be in 0..{hi}, got {value!r}")
        if not -EXP_BIAS <= self.exponent < EXP_BIAS:
            raise SpecError("agg.exponent", f"must be in -128..127, got {self.exponent!r}")
        return _HDR.pack(self.job, self.worker, self.flags, self.exponent + EXP_BIAS, self.pool_index,
                         self.count, self.seq)


def encode(header: AggHeader, values: np.ndarray) -> bytes:
    """UDP payload: header + ``values`` (int32, exactly :data:`ELEMS`, big-endian on the wire)."""
    values = np.asarray(values)
    if values.shape != (ELEMS,):
        raise SpecError("agg.values", f"need exactly {ELEMS} elements, got shape {values.shape}")
    if values.dtype != np.int32:
        raise SpecError("agg.values", f"need int32 elements, got {values.dtype}")
    return header.pack() + values.astype(">i4").tobytes()


def decode(payload: bytes) -> tuple[AggHeader, np.ndarray]:
    """Inverse of :func:`encode`; raises ``SpecError`` on a short or odd-sized payload."""
    if len(payload) < HEADER_BYTES:
        raise SpecError("agg.payload", f"needs at least {HEADER_BYTES} bytes, got {len(payload)}")
    job, worker, flags, exp, pool_index, count, seq = _HDR.unpack_from(payload)
    body = payload[HEADER_BYTES:]
    if len(body) % 4:
        raise SpecError("agg.payload", f"element bytes must be a multiple of 4, got {len(body)}")
    values = np.frombuffer(body, dtype=">i4").astype(np.int32)
    header = AggHeader(job=job, worker=worker, slot=pool_index & (SHADOW_BIT - 1),
                       shadow=1 if pool_index & SHADOW_BIT else 0, seq=seq, flags=flags,
                       exponent=exp - EXP_BIAS, count=count)
    return header, values


def job_port(job: int) -> int:
    """UDP port every worker of ``job`` sends from and receives results on (switch: dport = sport)."""
    return AGG_PORT + 1 + job


def slot_of(chunk: int, window: int, base_slot: int = 0) -> tuple[int, int]:
    """SwitchML's slot schedule: chunk ``c`` uses slot ``c % window``, copy ``(c // window) % 2``.

    Consecutive uses of one slot alternate copies, so a copy is reused only after every worker has
    moved on from it (see the P4 program's header comment).
    """
    if window <= 0:
        raise SpecError("agg.window", f"must be positive, got {window!r}")
    return base_slot + chunk % window, (chunk // window) % 2


def chunks_for(n_elements: int) -> int:
    """Packets needed for a tensor of ``n_elements`` (the last one zero-padded)."""
    return max(1, -(-n_elements // ELEMS))
