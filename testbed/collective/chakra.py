"""MLCommons Chakra execution traces -> the replay trace of :mod:`testbed.collective.trace` (pure).

Chakra (the ET format ASTRA-sim and PARAM replay) has no package on PyPI (the PyPI ``chakra`` is an
unrelated project), so this module reads the format itself: a few lines of protobuf wire decoding for the
fields the conversion needs, no protobuf runtime. Read from ``mlcommons/chakra`` at commit
21585d8f2d65603d791d2121e3d4632351120262 (2026-05-20): ``schema/protobuf/et_def.proto`` (field numbers),
``src/third_party/utils/protolib.py`` (file layout, gzip), ``src/jsonizer/jsonizer.py`` (the JSON form),
``src/feeder/et_feeder_node.cpp`` and ``json_node.cpp`` (attribute names and the feeder's JSON form); and
how ASTRA-sim issues the nodes (``astra-sim/workload/Workload.cc``: comm nodes run on the GPU only).

One file per rank, named ``<prefix>.<rank>.et`` as Chakra and ASTRA-sim write them::

    varint length | GlobalMetadata  (version, attr)         skipped
    varint length | Node            (id, name, type, ctrl_deps, data_deps, duration_micros, attr, ...)
    varint length | Node ...                                 (the file may be gzip-compressed)

Also accepted per rank: the ``chakra_jsonizer`` output (GlobalMetadata then one ``MessageToJson`` object per
node, concatenated) and the feeder's ``{"workload_graph": [...]}`` JSON.

Mapping (``n`` ranks)::

    COMP_NODE                         compute, duration_micros / 1e6 s
    COMM_COLL_NODE  comm_type         ALL_REDUCE allreduce, ALL_GATHER all_gather, REDUCE_SCATTER(_BLOCK)
                                      reduce_scatter, BROADCAST broadcast (root 0), ALL_TO_ALL all_to_all,
                                      BARRIER allreduce of one int32 per rank (what NCCL's barrier does);
                                      REDUCE, GATHER, SCATTER: refused (no such collective here)
                    comm_size         bytes, rounded up to a multiple of 4 and to at least 4 n
    COMM_SEND_NODE  comm_dst, comm_size (or tensor_size)    send to comm_dst
    COMM_RECV_NODE  comm_src, comm_size (or tensor_size)    recv from comm_src
    comm node with is_cpu_op true     compute (the host-side call; ASTRA-sim refuses comm on the CPU)
    METADATA, MEM_LOAD, MEM_STORE, INVALID   dropped; a node that depended on one depends on its deps

``deps`` = data_deps + ctrl_deps restricted to converted nodes (through dropped ones, transitively); ops are
listed in a topological order (file order where the deps allow). A ctrl_dep on a node that is not in the
file, or on the node itself, is ignored and counted (Chakra's PyTorch converter leaves both: parents it did
not emit, such as the root node, and backward ops as their own parent; ASTRA-sim's feeder resolves
data_deps only); such a data_dep is refused. ctrl_deps that close a cycle (seen in Chakra's own test trace:
a CPU op with its GPU kernel as ctrl_dep) are refused with the cycle named; ``--data-deps-only`` then
orders by data_deps alone. The result goes through
:func:`~testbed.collective.trace.load_trace` and :func:`~testbed.collective.trace.check`: collectives called
in different orders across ranks (e.g. process groups over a subset: ``pg_name`` is not modelled) or
unpaired send/recv are refused with the first mismatch named.
"""

from __future__ import annotations

import gzip
import json
import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from testbed.errors import SpecError

NODE_TYPES = {0: "INVALID_NODE", 1: "METADATA_NODE", 2: "MEM_LOAD_NODE", 3: "MEM_STORE_NODE", 4: "COMP_NODE",
              5: "COMM_SEND_NODE", 6: "COMM_RECV_NODE", 7: "COMM_COLL_NODE"}
COMP, SEND, RECV, COLL = 4, 5, 6, 7
COMM_TYPES = {0: "ALL_REDUCE", 1: "REDUCE", 2: "ALL_GATHER", 3: "GATHER", 4: "SCATTER", 5: "BROADCAST",
              6: "ALL_TO_ALL", 7: "REDUCE_SCATTER", 8: "REDUCE_SCATTER_BLOCK", 9: "BARRIER"}
#: Chakra collective -> ours (BARRIER: an allreduce of one element per rank)
COLLECTIVE_OF = {"ALL_REDUCE": "allreduce", "ALL_GATHER": "all_gather", "REDUCE_SCATTER": "reduce_scatter",
                 "REDUCE_SCATTER_BLOCK": "reduce_scatter", "BROADCAST": "broadcast", "ALL_TO_ALL": "all_to_all",
                 "BARRIER": "allreduce"}

# AttributeProto's oneof value: field number -> (name, how the wire value is read)
_ATTR_SCALARS = {3: ("double_val", "double"), 5: ("float_val", "float"), 7: ("int32_val", "int32"),
                 9: ("int64_val", "int64"), 11: ("uint32_val", "uint"), 13: ("uint64_val", "uint"),
                 15: ("sint32_val", "zigzag"), 17: ("sint64_val", "zigzag"), 19: ("fixed32_val", "uint"),
                 21: ("fixed64_val", "uint"), 23: ("sfixed32_val", "sfixed32"), 25: ("sfixed64_val", "sfixed64"),
                 27: ("bool_val", "bool"), 29: ("string_val", "string"), 31: ("bytes_val", "bytes")}
_WIRE = {"double": 1, "float": 5, "int32": 0, "int64": 0, "uint": 0, "zigzag": 0, "sfixed32": 5, "sfixed64": 1,
         "bool": 0, "string": 2, "bytes": 2}
_INT_KINDS = ("int32", "int64", "uint", "zigzag", "sfixed32", "sfixed64")


class _Malformed(Exception):
    """A wire-format fault at a byte offset; turned into a SpecError naming the file and node."""


@dataclass(frozen=True)
class Node:
    """The fields of a Chakra ``Node`` the conversion reads; ``attrs`` maps an attribute name to its value
    (lists appear as the string ``"<list>"``)."""

    id: int
    name: str = ""
    type: int = 0
    ctrl_deps: tuple = ()
    data_deps: tuple = ()
    duration_micros: int = 0
    attrs: dict = field(default_factory=dict)


# -- protobuf wire format ----------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise _Malformed(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise _Malformed(f"varint longer than 10 bytes at byte {pos}")


def _fields(buf: bytes):
    """Yield ``(field number, wire type, value)``: an int for varint/fixed, bytes for length-delimited."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise _Malformed(f"field number 0 at byte {pos}")
        if wt == 0:
            value, pos = _varint(buf, pos)
        elif wt in (1, 5):
            width = 8 if wt == 1 else 4
            if pos + width > len(buf):
                raise _Malformed(f"field {num}: truncated fixed{width * 8} at byte {pos}")
            value = int.from_bytes(buf[pos:pos + width], "little")
            pos += width
        elif wt == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise _Malformed(f"field {num}: {size} bytes announced at byte {pos}, {len(buf) - pos} left")
            value = buf[pos:pos + size]
            pos += size
        else:
            raise _Malformed(f"field {num}: wire type {wt} (groups) is not used by the Chakra schema")
        yield num, wt, value


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _scalar(kind: str, v):
    if kind == "int32":
        return _signed(v, 32)        # negative int32 travels as a 10-byte (64-bit) varint
    if kind == "int64":
        return _signed(v, 64)
    if kind == "zigzag":
        return (v >> 1) ^ -(v & 1)
    if kind == "sfixed32":
        return _signed(v, 32)
    if kind == "sfixed64":
        return _signed(v, 64)
    if kind == "bool":
        return v != 0
    if kind == "double":
        return struct.unpack("<d", v.to_bytes(8, "little"))[0]
    if kind == "float":
        return struct.unpack("<f", v.to_bytes(4, "little"))[0]
    if kind == "string":
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed("string is not UTF-8") from None
    return v


def _uint64s(wt: int, value, what: str) -> list[int]:
    """A repeated uint64: one varint, or a packed run of them (proto3's default)."""
    if wt == 0:
        return [value]
    if wt != 2:
        raise _Malformed(f"{what}: wire type {wt}, expected varint or packed")
    out, pos = [], 0
    while pos < len(value):
        v, pos = _varint(value, pos)
        out.append(v)
    return out


def _attribute(buf: bytes) -> tuple[str, object]:
    name, value = "", None
    for num, wt, v in _fields(buf):
        if num == 1:
            if wt != 2:
                raise _Malformed("attr.name: not a string")
            name = _scalar("string", v)
        elif num in _ATTR_SCALARS:
            key, kind = _ATTR_SCALARS[num]
            if wt != _WIRE[kind]:
                raise _Malformed(f"attr {name or '?'}.{key}: wire type {wt}, expected {_WIRE[kind]}")
            value = _scalar(kind, v)
        elif 4 <= num <= 32:
            value = "<list>"
    return name, value


def decode_node(buf: bytes) -> Node:
    """One serialized ``Node`` message (fields 1-7 and 10; inputs/outputs and start time are skipped)."""
    got: dict = {"ctrl_deps": [], "data_deps": [], "attrs": {}}
    try:
        _node_fields(buf, got)
    except _Malformed as exc:
        raise _Malformed(f"node {got.get('id', '?')} {exc}") from None
    return Node(got.get("id", 0), got.get("name", ""), got.get("type", 0), tuple(got["ctrl_deps"]),
                tuple(got["data_deps"]), got.get("duration_micros", 0), got["attrs"])


def _node_fields(buf: bytes, got: dict) -> None:
    scalar = {1: "id", 3: "type", 7: "duration_micros"}
    for num, wt, v in _fields(buf):
        if num in scalar:
            if wt != 0:
                raise _Malformed(f"{scalar[num]}: wire type {wt}, expected varint")
            got[scalar[num]] = v
        elif num == 2:
            if wt != 2:
                raise _Malformed(f"name: wire type {wt}, expected a string")
            got["name"] = _scalar("string", v)
        elif num in (4, 5):
            key = "ctrl_deps" if num == 4 else "data_deps"
            got[key] += _uint64s(wt, v, key)
        elif num == 10:
            if wt != 2:
                raise _Malformed(f"attr: wire type {wt}, expected a message")
            name, value = _attribute(v)
            got["attrs"][name] = value


def _messages(data: bytes):
    """The length-delimited messages of an ET file, with their byte offsets."""
    pos = 0
    while pos < len(data):
        start = pos
        size, pos = _varint(data, pos)
        if pos + size > len(data):
            raise _Malformed(f"message at byte {start} announces {size} bytes, {len(data) - pos} left (truncated)")
        yield start, data[pos:pos + size]
        pos += size


# -- files -------------------------------------------------------------------------------------------------


def read_nodes(path) -> list[Node]:
    """All nodes of one rank's trace, in file order: binary ET (gzip or not) or one of the JSON forms."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError(str(path), f"cannot read: {exc.strerror}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise SpecError(str(path), f"broken gzip: {exc}") from None
    if data.lstrip()[:1] in (b"{", b"["):
        return _json_nodes(path, data)
    nodes, last = [], "GlobalMetadata"
    try:
        for k, (offset, msg) in enumerate(_messages(data)):
            last = f"message at byte {offset}"
            if k == 0:
                continue                  # GlobalMetadata: version and attributes, nothing to replay
            nodes.append(decode_node(msg))
            last = f"after node {nodes[-1].id}"
    except _Malformed as exc:
        raise SpecError(str(path), f"not a Chakra ET file ({last}): {exc}") from None
    if not data:
        raise SpecError(str(path), "empty file: a Chakra ET starts with its GlobalMetadata")
    return nodes


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def _json_nodes(path: Path, data: bytes) -> list[Node]:
    dec, text, objs, pos = json.JSONDecoder(), data.decode("utf-8", "replace"), [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            break
        try:
            obj, pos = dec.raw_decode(text, pos)
        except ValueError as exc:
            raise SpecError(str(path), f"not JSON: {exc}") from None
        objs.append(obj)
    if len(objs) == 1 and isinstance(objs[0], dict) and "workload_graph" in objs[0]:
        return [_feeder_node(path, k, o) for k, o in enumerate(objs[0]["workload_graph"])]
    objs = [o for o in objs if not (isinstance(o, dict) and set(o) <= {"version", "attr"})]   # GlobalMetadata
    return [_jsonizer_node(path, k, o) for k, o in enumerate(objs)]


def _json_int(path, where: str, v, signed=False) -> int:
    try:
        out = int(v) if not isinstance(v, (bool, float)) else None
    except (TypeError, ValueError):
        out = None
    if out is None or (out < 0 and not signed):
        raise SpecError(str(path), f"{where}: must be an integer, got {v!r}")
    return out


def _jsonizer_node(path, k: int, obj) -> Node:
    """One ``MessageToJson(node)`` object: camelCase keys, 64-bit integers as strings, enums by name."""
    if not isinstance(obj, dict):
        raise SpecError(str(path), f"JSON node #{k}: must be an object")
    o = {_snake(key): v for key, v in obj.items()}
    nid = _json_int(path, f"JSON node #{k} id", o.get("id", 0))
    where = f"node {nid}"
    kind = o.get("type", 0)
    names = {v: t for t, v in NODE_TYPES.items()}
    kind = names[kind] if kind in names else _json_int(path, f"{where} type", kind)
    attrs = {}
    for a in o.get("attr", []):
        a = {_snake(key): v for key, v in a.items()} if isinstance(a, dict) else {}
        vals = [(key, v) for key, v in a.items() if key.endswith("_val")]
        lists = [key for key in a if key.endswith("_list")]
        value = vals[0][1] if vals else ("<list>" if lists else None)
        if vals and vals[0][0] not in ("double_val", "float_val", "bool_val", "string_val", "bytes_val"):
            value = _json_int(path, f"{where} attr {a.get('name')}", value, signed=True)
        attrs[a.get("name", "")] = value
    return Node(nid, str(o.get("name", "")), kind,
                tuple(_json_int(path, f"{where} ctrl_deps", d) for d in o.get("ctrl_deps", [])),
                tuple(_json_int(path, f"{where} data_deps", d) for d in o.get("data_deps", [])),
                _json_int(path, f"{where} duration_micros", o.get("duration_micros", 0)), attrs)


def _feeder_node(path, k: int, o) -> Node:
    """One node of the feeder's ``workload_graph`` JSON (``Id``, ``NodeType``, ``runtime``, flat attributes)."""
    if not isinstance(o, dict) or "Id" not in o or "NodeType" not in o:
        raise SpecError(str(path), f"workload_graph[{k}]: must be an object with Id and NodeType")
    nid = _json_int(path, f"workload_graph[{k}].Id", o["Id"])
    where = f"node {nid}"
    fixed = {"Id", "Name", "NodeType", "ctrlDeps", "data_deps", "runtime"}
    return Node(nid, str(o.get("Name", "")), _json_int(path, f"{where} NodeType", o["NodeType"]),
                tuple(_json_int(path, f"{where} ctrlDeps", d) for d in o.get("ctrlDeps", [])),
                tuple(_json_int(path, f"{where} data_deps", d) for d in o.get("data_deps", [])),
                _json_int(path, f"{where} runtime", o.get("runtime", 0)),
                {key: v for key, v in o.items() if key not in fixed})


_RANK_FILE = re.compile(r"\.(\d+)\.(et|et\.gz|json)$")


def rank_files(args: list[str]) -> list[Path]:
    """The per-rank files, rank order: a prefix (``<prefix>.<rank>.et``, ``.et.gz`` or ``.json``) or the
    files themselves (by the ``.<rank>.`` in their names when all have one, else in the order given)."""
    if len(args) == 1 and not Path(args[0]).is_file():
        prefix = Path(args[0])
        found: dict = {}
        for p in (sorted(prefix.parent.iterdir()) if prefix.parent.is_dir() else ()):
            m = _RANK_FILE.search(p.name)
            if m and p.name[:m.start()] == prefix.name:
                if int(m.group(1)) in found:
                    raise SpecError(args[0], f"rank {m.group(1)} twice: {found[int(m.group(1))]} and {p}")
                found[int(m.group(1))] = p
        if not found:
            raise SpecError(args[0], "no such file, and no <prefix>.<rank>.et files under this prefix")
        files = found
    else:
        for a in args:
            if not Path(a).is_file():
                raise SpecError(a, "no such file")
        ranks = [_RANK_FILE.search(Path(a).name) for a in args]
        files = ({int(m.group(1)): Path(a) for m, a in zip(ranks, args, strict=True)} if all(ranks)
                 else {r: Path(a) for r, a in enumerate(args)})
        if len(files) != len(args):
            raise SpecError(args[0], "two files give the same rank")
    missing = [r for r in range(len(files)) if r not in files]
    if missing:
        raise SpecError(args[0], f"ranks must be 0..{len(files) - 1}; rank {missing[0]} has no file "
                                 f"(found {', '.join(str(files[r]) for r in sorted(files))})")
    if len(files) < 2:
        raise SpecError(args[0], "a replay needs at least 2 ranks (one file per rank)")
    return [files[r] for r in range(len(files))]


# -- conversion --------------------------------------------------------------------------------------------


def _int_attr(path, node: Node, *names: str) -> int | None:
    """The first of ``names`` the node carries, as a non-negative integer (any integer encoding)."""
    for name in names:
        if name in node.attrs:
            v = node.attrs[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise SpecError(str(path), f"node {node.id} attr {name}: must be a non-negative integer, got {v!r}")
            return v
    return None


def _need(path, node: Node, *names: str) -> int:
    v = _int_attr(path, node, *names)
    if v is None:
        raise SpecError(str(path), f"node {node.id} ({NODE_TYPES[node.type]}) attr {names[0]}: missing; "
                                   f"a {NODE_TYPES[node.type]} needs it")
    return v


def _round4(size: int, floor: int) -> int:
    return max(floor, -(-size // 4) * 4)


def _op(path, rank: int, n: int, node: Node, stats: dict) -> dict | None:
    """The trace op of one node, or None for a node type that is dropped."""
    if node.type not in NODE_TYPES:
        raise SpecError(str(path), f"node {node.id} type: {node.type} is not a NodeType of the Chakra schema "
                                   f"({', '.join(f'{k} {v}' for k, v in NODE_TYPES.items())})")
    oid = f"n{node.id}"
    if node.type in (SEND, RECV, COLL) and node.attrs.get("is_cpu_op") is True:
        stats["cpu_comm_as_compute"] += 1
        return _compute(path, oid, node)
    if node.type == COMP:
        return _compute(path, oid, node)
    if node.type == COLL:
        code = _need(path, node, "comm_type")
        if code not in COMM_TYPES:
            raise SpecError(str(path), f"node {node.id} attr comm_type: {code} is not a CollectiveCommType of the "
                                       f"Chakra schema ({', '.join(f'{k} {v}' for k, v in COMM_TYPES.items())})")
        name = COMM_TYPES[code]
        if name not in COLLECTIVE_OF:
            raise SpecError(str(path), f"node {node.id} attr comm_type: {name} is not replayable; supported: "
                                       f"{', '.join(COLLECTIVE_OF)}")
        size = 0 if name == "BARRIER" else _need(path, node, "comm_size")
        size4 = _round4(size, 4 * n)
        stats["sizes_rounded"] += size4 != size and name != "BARRIER"
        return {"id": oid, "type": "collective", "collective": COLLECTIVE_OF[name], "bytes": size4}
    if node.type in (SEND, RECV):
        me, peer_key = ("comm_src", "comm_dst") if node.type == SEND else ("comm_dst", "comm_src")
        own = _int_attr(path, node, me)
        if own is not None and own != rank:
            raise SpecError(str(path), f"node {node.id} attr {me}: {own}, but this file is rank {rank}")
        peer = _need(path, node, peer_key)
        if peer >= n or peer == rank:
            raise SpecError(str(path), f"node {node.id} attr {peer_key}: must be another rank 0..{n - 1}, got {peer}")
        size = _need(path, node, "comm_size", "tensor_size")
        size4 = _round4(size, 4)
        stats["sizes_rounded"] += size4 != size
        return {"id": oid, "type": "send" if node.type == SEND else "recv", "peer": peer, "bytes": size4}
    stats["dropped"][NODE_TYPES[node.type]] = stats["dropped"].get(NODE_TYPES[node.type], 0) + 1
    return None


def _compute(path, oid: str, node: Node) -> dict:
    if node.duration_micros >= 3600e6:
        raise SpecError(str(path), f"node {node.id} duration_micros: {node.duration_micros} is an hour or more")
    return {"id": oid, "type": "compute", "seconds": node.duration_micros / 1e6}


def _deps(path, nodes: list[Node], stats: dict, ctrl_deps: bool = True) -> dict:
    """Node id -> the ids it waits for: its data_deps (each must be in the file, not itself) and the
    ctrl_deps that name another node of the file (the rest are counted in ``stats`` and ignored)."""
    ids = {}
    for node in nodes:
        if node.id in ids:
            raise SpecError(str(path), f"node {node.id} id: appears twice")
        ids[node.id] = node
    out = {}
    for node in nodes:
        for d in node.data_deps:
            if d not in ids or d == node.id:
                raise SpecError(str(path), f"node {node.id} data_deps: node {d} is "
                                           f"{'the node itself' if d == node.id else 'not in the file'}")
        ctrl = {d for d in node.ctrl_deps if d in ids and d != node.id} if ctrl_deps else set()
        stats["ctrl_deps_ignored"] += len(set(node.ctrl_deps)) - len(ctrl)
        out[node.id] = set(node.data_deps) | ctrl
    return out


def _topological(path, nodes: list[Node], deps: dict) -> list[Node]:
    """Nodes after all their deps, file order where the deps allow (Kahn's algorithm with a heap)."""
    import heapq

    index = {node.id: k for k, node in enumerate(nodes)}
    children: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for k, node in enumerate(nodes):
        for d in deps[node.id]:
            children[index[d]].append(k)
            waiting[k] += 1
    ready = [k for k in range(len(nodes)) if not waiting[k]]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(nodes[k])
        for c in children[k]:
            waiting[c] -= 1
            if not waiting[c]:
                heapq.heappush(ready, c)
    if len(order) < len(nodes):
        stuck = {nodes[k].id for k in range(len(nodes)) if waiting[k]}
        cycle = [min(stuck)]
        while cycle.count(cycle[-1]) < 2:          # every stuck node waits for a stuck node: walk to a repeat
            cycle.append(min(d for d in deps[cycle[-1]] if d in stuck))
        cycle = cycle[cycle.index(cycle[-1]):]
        ctrl = any(b not in nodes[index[a]].data_deps for a, b in zip(cycle, cycle[1:], strict=False))
        raise SpecError(str(path), f"node {cycle[0]} {'ctrl_deps' if ctrl else 'data_deps'}: dependency cycle "
                                   f"{' -> '.join(map(str, cycle))}"
                                   + ("; convert with --data-deps-only (what ASTRA-sim follows)" if ctrl else ""))
    return order


def _convert_rank(path, rank: int, n: int, nodes: list[Node], stats: dict, ctrl_deps: bool) -> list[dict]:
    ops, kept, position = [], {}, {}     # kept: node id -> the converted nodes it stands for as a dependency
    waits = _deps(path, nodes, stats, ctrl_deps)
    for node in _topological(path, nodes, waits):
        op = _op(path, rank, n, node, stats)
        deps: set = set()
        for d in waits[node.id]:
            deps |= kept[d]
        if op is None:
            kept[node.id] = frozenset(deps)
            continue
        op["deps"] = [f"n{d}" for d in sorted(deps, key=position.__getitem__)]
        position[node.id] = len(ops)
        ops.append(op)
        kept[node.id] = frozenset((node.id,))
    return ops


def _where(files, ops, r: int, k: int) -> str:
    return f"{files[r]} node {ops[r][k]['id'][1:]}"


def _check_pairing(files, ops) -> None:
    """Collectives in one order on every rank; the k-th send a->b matches the k-th recv of b from a."""
    colls = [[(k, o["collective"], o["bytes"]) for k, o in enumerate(rk) if o["type"] == "collective"] for rk in ops]
    for r in range(1, len(ops)):
        for i in range(max(len(colls[0]), len(colls[r]))):
            a = colls[0][i] if i < len(colls[0]) else None
            b = colls[r][i] if i < len(colls[r]) else None
            if a is None or b is None or a[1:] != b[1:]:
                said = (f"{_where(files, ops, r, b[0])} ({b[1]} {b[2]} B)" if b else f"{files[r]} (none)")
                ref = (f"{_where(files, ops, 0, a[0])} ({a[1]} {a[2]} B)" if a else f"{files[0]} (none)")
                raise SpecError(str(files[r]), f"collective #{i + 1} differs across ranks: {said} vs rank 0 {ref}; "
                                               "every rank must call the same collectives in the same order "
                                               "(collectives of a process-group subset, pg_name, are not modelled)")
    msgs: dict = {}
    for r, rk in enumerate(ops):
        for k, o in enumerate(rk):
            if o["type"] in ("send", "recv"):
                pair = (r, o["peer"]) if o["type"] == "send" else (o["peer"], r)
                msgs.setdefault((pair, o["type"]), []).append((r, k, o["bytes"]))
    for (pair, kind), items in msgs.items():
        other = msgs.get((pair, "recv" if kind == "send" else "send"), [])
        for i, (r, k, size) in enumerate(items):
            if i >= len(other) or other[i][2] != size:
                match = (f"{_where(files, ops, other[i][0], other[i][1])} has {other[i][2]} B" if i < len(other)
                         else f"rank {pair[1] if kind == 'send' else pair[0]} has no matching {'recv' if kind == 'send' else 'send'}")
                raise SpecError(str(files[r]), f"node {ops[r][k]['id'][1:]}: {kind} #{i + 1} of rank {pair[0]} -> "
                                               f"{pair[1]} ({size} B) is not paired: {match}")


def _schedule_error(files, doc: dict, exc) -> SpecError:
    """The simulator names a rank and an op of the compiled schedule: name the Chakra node instead."""
    from testbed.collective.trace import compile_trace, load_trace

    m = re.search(r"rank (\d+)(?: cannot run)? op (\d+)", str(exc))
    where = str(files[0])
    if m:
        r, i = int(m.group(1)), int(m.group(2))
        g = next(g for g in compile_trace(load_trace(doc))[1][r] if g.first <= i <= g.end)
        where = f"{files[r]} node {g.id[1:]}" + (f" (iteration {g.iteration + 1})" if doc["iterations"] > 1 else "")
    return SpecError(where, f"converted trace cannot complete (messages between two ranks are matched in the "
                            f"order both sides post them): {exc}")


def convert(args: list[str], iterations: int = 1, ctrl_deps: bool = True) -> tuple[dict, dict]:
    """Chakra ETs (a prefix or one file per rank) -> ``(trace document version 1, summary)``; without
    ``ctrl_deps`` only data_deps order the ops (as ASTRA-sim's feeder does).

    Raises:
        SpecError: naming the file, the node id and the field, for unreadable or malformed input, a node
            that cannot be replayed, or a converted trace that fails :func:`~testbed.collective.trace.check`.
    """
    from testbed.collective.engine import ScheduleError
    from testbed.collective.trace import check, load_trace

    files = rank_files(args)
    n = len(files)
    stats = {"dropped": {}, "cpu_comm_as_compute": 0, "sizes_rounded": 0, "ctrl_deps_ignored": 0}
    nodes = [read_nodes(p) for p in files]
    ops = [_convert_rank(p, r, n, ns, stats, ctrl_deps) for r, (p, ns) in enumerate(zip(files, nodes, strict=True))]
    _check_pairing(files, ops)
    doc = {"version": 1, "ranks": n, "iterations": iterations,
           "description": f"converted from Chakra execution traces {', '.join(p.name for p in files)}",
           "ops": ops}
    try:
        result = check(load_trace(doc))
    except SpecError as exc:
        m = re.match(r"ops\[(\d+)\](?:\[(\d+)\])?", exc.field)
        where = (_where(files, ops, int(m.group(1)), int(m.group(2))) if m and m.group(2)
                 else str(files[int(m.group(1))]) if m else exc.field)
        raise SpecError(where, f"converted trace refused: {exc.message}") from None
    except ScheduleError as exc:
        raise _schedule_error(files, doc, exc) from None
    count = {t: [sum(o["type"] == t for o in rk) for rk in ops] for t in ("compute", "collective", "send", "recv")}
    summary = {"files": [str(p) for p in files], "ranks": n, "nodes_per_rank": [len(x) for x in nodes],
               "ops_per_rank": count, **stats,
               "sent_bytes_per_rank": [e * 4 for e in result["sent_elements"]],
               "compute_only_step_s": result["time_s"] / iterations}
    return doc, summary
