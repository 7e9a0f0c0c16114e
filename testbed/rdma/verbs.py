"""Verbs-like objects without a network: protection domain, memory regions, completion queue, work
requests and completions (names follow libibverbs: ``reg_mr``, ``post_send``, ``poll_cq``).

The queue pair's protocol engine is :mod:`testbed.rdma.qp`; the socket device that moves its
datagrams is :mod:`testbed.rdma.device`.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from dataclasses import dataclass

from testbed.errors import TestbedError

#: Access flags of a memory region (IBV_ACCESS_*).
LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC = 1, 2, 4, 8


class RdmaError(TestbedError):
    """A verbs call that cannot be honoured (QP in error state, bad region, ...)."""


class WcStatus(enum.Enum):
    SUCCESS = "success"
    LOC_LEN_ERR = "local length error"
    REM_ACCESS_ERR = "remote access error"
    REM_INV_REQ_ERR = "remote invalid request error"
    REM_OP_ERR = "remote operation error"
    RETRY_EXC_ERR = "transport retry counter exceeded"
    RNR_RETRY_EXC_ERR = "RNR retry counter exceeded"
    WR_FLUSH_ERR = "work request flushed"


class WcOpcode(enum.Enum):
    SEND = "send"
    RDMA_WRITE = "rdma_write"
    RDMA_READ = "rdma_read"
    COMP_SWAP = "comp_swap"
    FETCH_ADD = "fetch_add"
    RECV = "recv"
    RECV_RDMA_WITH_IMM = "recv_rdma_with_imm"


@dataclass
class WorkCompletion:
    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    qp_num: int
    byte_len: int = 0
    imm: int | None = None
    src_qp: int | None = None      # UD receives: the sending QP (from the DETH)


class MemoryRegion:
    """A registered buffer: local ``view`` plus the (addr, rkey) a peer uses to reach it."""

    def __init__(self, pd: "ProtectionDomain", buf, addr: int, rkey: int, access: int):
        self.pd = pd
        self.buf = buf
        self.view = memoryview(buf).cast("B")
        if self.view.readonly and access & (LOCAL_WRITE | REMOTE_WRITE):
            raise RdmaError("cannot register a read-only buffer for writing")
        self.addr = addr
        self.length = len(self.view)
        self.rkey = rkey
        self.lkey = rkey
        self.access = access

    def contains(self, addr: int, length: int) -> bool:
        return self.addr <= addr and addr + length <= self.addr + self.length


class ProtectionDomain:
    """Owns memory regions; hands out rkeys and non-overlapping virtual addresses."""

    def __init__(self, seed: int | None = None):
        self._rng = random.Random(seed)
        self._mrs: dict[int, MemoryRegion] = {}
        self._next_addr = 0x7F00_0000_0000 + self._rng.randrange(1 << 20) * 4096

    def reg_mr(self, buf, access: int = LOCAL_WRITE | REMOTE_WRITE) -> MemoryRegion:
        while True:
            rkey = self._rng.getrandbits(32)
            if rkey and rkey not in self._mrs:
                break
        mr = MemoryRegion(self, buf, self._next_addr, rkey, access)
        self._next_addr += (mr.length + 4095) // 4096 * 4096 + 4096
        self._mrs[rkey] = mr
        return mr

    def dereg_mr(self, mr: MemoryRegion) -> None:
        self._mrs.pop(mr.rkey, None)

    def lookup(self, rkey: int) -> MemoryRegion | None:
        return self._mrs.get(rkey)


class CompletionQueue:
    def __init__(self, depth: int = 1 << 16):
        self.depth = depth
        self._q: deque[WorkCompletion] = deque()

    def push(self, wc: WorkCompletion) -> None:
        if len(self._q) >= self.depth:
            raise RdmaError(f"completion queue overrun (depth {self.depth})")
        self._q.append(wc)

    def poll(self, max_entries: int = 16) -> list[WorkCompletion]:
        out = []
        while self._q and len(out) < max_entries:
            out.append(self._q.popleft())
        return out

    def __len__(self) -> int:
        return len(self._q)
