"""BTH opcodes and the extended headers each one carries (IBA Vol. 1 §9.2.1, Table 38), as plain data.

Shared by the Scapy layers, the capture validator and the soft-RDMA data path, none of which should
keep its own copy. Opcode = transport (bits 7:5: RC 0x00, UC 0x20, RD 0x40, UD 0x60) + operation.
"""

from __future__ import annotations

ROCE_UDP_PORT = 4791
CNP = 0x81
ACK = 0x11
ATOMIC_ACK = 0x12

_OPS = {  # operation: (code, extended headers in order)
    "SEND_FIRST": (0x00, ()),
    "SEND_MIDDLE": (0x01, ()),
    "SEND_LAST": (0x02, ()),
    "SEND_LAST_WITH_IMMEDIATE": (0x03, ("ImmDt",)),
    "SEND_ONLY": (0x04, ()),
    "SEND_ONLY_WITH_IMMEDIATE": (0x05, ("ImmDt",)),
    "RDMA_WRITE_FIRST": (0x06, ("RETH",)),
    "RDMA_WRITE_MIDDLE": (0x07, ()),
    "RDMA_WRITE_LAST": (0x08, ()),
    "RDMA_WRITE_LAST_WITH_IMMEDIATE": (0x09, ("ImmDt",)),
    "RDMA_WRITE_ONLY": (0x0A, ("RETH",)),
    "RDMA_WRITE_ONLY_WITH_IMMEDIATE": (0x0B, ("RETH", "ImmDt")),
    "RDMA_READ_REQUEST": (0x0C, ("RETH",)),
    "RDMA_READ_RESPONSE_FIRST": (0x0D, ("AETH",)),
    "RDMA_READ_RESPONSE_MIDDLE": (0x0E, ()),
    "RDMA_READ_RESPONSE_LAST": (0x0F, ("AETH",)),
    "RDMA_READ_RESPONSE_ONLY": (0x10, ("AETH",)),
    "ACKNOWLEDGE": (0x11, ("AETH",)),
    "ATOMIC_ACKNOWLEDGE": (0x12, ("AETH", "AtomicAckETH")),
    "COMPARE_SWAP": (0x13, ("AtomicETH",)),
    "FETCH_ADD": (0x14, ("AtomicETH",)),
    "SEND_LAST_WITH_INVALIDATE": (0x16, ("IETH",)),
    "SEND_ONLY_WITH_INVALIDATE": (0x17, ("IETH",)),
}
_UC = ("SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_LAST_WITH_IMMEDIATE", "SEND_ONLY",
       "SEND_ONLY_WITH_IMMEDIATE", "RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST",
       "RDMA_WRITE_LAST_WITH_IMMEDIATE", "RDMA_WRITE_ONLY", "RDMA_WRITE_ONLY_WITH_IMMEDIATE")

#: opcode -> name, e.g. 0x0A -> "RC_RDMA_WRITE_ONLY".
OPCODE_NAMES: dict[int, str] = {}
#: opcode -> names of the extended headers after the BTH, in order.
EXT_HEADERS: dict[int, tuple[str, ...]] = {}
for _name, (_code, _hdrs) in _OPS.items():
    OPCODE_NAMES[_code] = f"RC_{_name}"
    EXT_HEADERS[_code] = _hdrs
for _name in _UC:
    _code, _hdrs = _OPS[_name]
    OPCODE_NAMES[0x20 + _code] = f"UC_{_name}"
    EXT_HEADERS[0x20 + _code] = _hdrs
OPCODE_NAMES[0x64] = "UD_SEND_ONLY"
EXT_HEADERS[0x64] = ("DETH",)
OPCODE_NAMES[0x65] = "UD_SEND_ONLY_WITH_IMMEDIATE"
EXT_HEADERS[0x65] = ("DETH", "ImmDt")
OPCODE_NAMES[CNP] = "CNP"
EXT_HEADERS[CNP] = ("CNPPadding",)

#: Byte length of each extended header.
HEADER_LEN = {"RETH": 16, "DETH": 8, "AETH": 4, "AtomicETH": 28, "AtomicAckETH": 8, "ImmDt": 4,
              "IETH": 4, "CNPPadding": 16}
#: opcode -> total length of its extended headers.
EXT_LEN = {op: sum(HEADER_LEN[h] for h in hdrs) for op, hdrs in EXT_HEADERS.items()}


def op_name(opcode: int) -> str:
    return OPCODE_NAMES.get(opcode, f"reserved(0x{opcode:02x})")


def operation(opcode: int) -> int:
    """The operation part (bits 4:0) of an RC/UC opcode."""
    return opcode & 0x1F


# Position of a request packet inside its message, for sequence checks.
FIRST, MIDDLE, LAST, ONLY = "first", "middle", "last", "only"
_POSITION = {0x00: FIRST, 0x01: MIDDLE, 0x02: LAST, 0x03: LAST, 0x04: ONLY, 0x05: ONLY,
             0x06: FIRST, 0x07: MIDDLE, 0x08: LAST, 0x09: LAST, 0x0A: ONLY, 0x0B: ONLY,
             0x0C: ONLY, 0x13: ONLY, 0x14: ONLY, 0x16: LAST, 0x17: ONLY}
#: message family of a request operation: "send", "write", "read", "atomic".
_FAMILY = {0x00: "send", 0x01: "send", 0x02: "send", 0x03: "send", 0x04: "send", 0x05: "send",
           0x16: "send", 0x17: "send", 0x06: "write", 0x07: "write", 0x08: "write", 0x09: "write",
           0x0A: "write", 0x0B: "write", 0x0C: "read", 0x13: "atomic", 0x14: "atomic"}


UD_SEND_ONLY, UD_SEND_ONLY_IMM = 0x64, 0x65


def is_ud(opcode: int) -> bool:
    return opcode in (UD_SEND_ONLY, UD_SEND_ONLY_IMM)


def is_uc(opcode: int) -> bool:
    return 0x20 <= opcode < 0x40


def is_request(opcode: int) -> bool:
    """RC/UC/UD request packets (those a requester sends), excluding responses, ACKs and CNPs."""
    if is_ud(opcode):
        return True
    return opcode < 0x40 and operation(opcode) in _POSITION and opcode in OPCODE_NAMES


def position(opcode: int) -> str | None:
    if is_ud(opcode):
        return ONLY
    return _POSITION.get(operation(opcode)) if opcode < 0x40 else None


def family(opcode: int) -> str | None:
    if is_ud(opcode):
        return "send"
    return _FAMILY.get(operation(opcode)) if opcode < 0x40 else None


def carries_payload(opcode: int) -> bool:
    return family(opcode) in ("send", "write")
