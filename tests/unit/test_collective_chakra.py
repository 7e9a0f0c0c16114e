"""Chakra execution traces -> replay traces (testbed/collective/chakra.py).

The ET files here are written by a small protobuf *encoder* of this test's own (field numbers from
mlcommons/chakra schema/protobuf/et_def.proto), so the decoder is checked against bytes it did not
produce; tests/data/chakra holds real files written by Chakra's tools (see its README).
"""

from __future__ import annotations

import gzip
import json
import shutil
import struct
from pathlib import Path

import pytest

from testbed.collective import chakra as C
from testbed.collective import trace as T
from testbed.errors import SpecError

DATA = Path(__file__).resolve().parent.parent / "data" / "chakra"

# -- an independent encoder: protobuf wire format, by hand ------------------------------------------------

COMP, SEND, RECV, COLL, METADATA, MEM_LOAD = 4, 5, 6, 7, 1, 2
ALL_REDUCE, REDUCE, ALL_GATHER, BROADCAST, BARRIER = 0, 1, 2, 5, 9


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1               # negative ints travel as their 64-bit two's complement
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def tag(num: int, wire: int) -> bytes:
    return varint(num << 3 | wire)


def vint(num: int, v: int) -> bytes:
    return tag(num, 0) + varint(v)


def blob(num: int, payload: bytes) -> bytes:
    return tag(num, 2) + varint(len(payload)) + payload


# AttributeProto value fields used below: int32 7, int64 9, uint64 13, sint64 17, fixed32 19, double 3,
# bool 27, string 29, int64 list 10
def attr(name: str, kind: str, value) -> bytes:
    body = blob(1, name.encode())
    if kind == "int32":
        body += vint(7, value)
    elif kind == "int64":
        body += vint(9, value)
    elif kind == "uint64":
        body += vint(13, value)
    elif kind == "sint64":
        body += vint(17, (value << 1) ^ (value >> 63))
    elif kind == "fixed32":
        body += tag(19, 5) + struct.pack("<I", value)
    elif kind == "double":
        body += tag(3, 1) + struct.pack("<d", value)
    elif kind == "bool":
        body += vint(27, int(value))
    elif kind == "string":
        body += blob(29, value.encode())
    elif kind == "int64_list":
        body += blob(10, b"".join(vint(1, v) for v in value))
    return blob(10, body)


def node(nid: int, kind: int, name: str = "", data=(), ctrl=(), micros: int = 0, attrs=(), packed=True) -> bytes:
    out = vint(1, nid) + blob(2, name.encode()) + vint(3, kind)
    for num, deps in ((4, ctrl), (5, data)):
        if deps and packed:
            out += blob(num, b"".join(varint(d) for d in deps))
        else:
            out += b"".join(vint(num, d) for d in deps)
    out += vint(6, 12345) + vint(7, micros) + blob(8, blob(1, b"[[1, 2]]"))   # start time, inputs: skipped
    return out + b"".join(attrs)


def et(*nodes: bytes) -> bytes:
    meta = blob(1, b"0.0.4") + attr("schema", "string", "1.0.2-chakra.0.0.4")      # GlobalMetadata
    return b"".join(varint(len(m)) + m for m in (meta, *nodes))


def coll(nid, comm_type, size, data=(), ctrl=(), size_kind="int64"):
    return node(nid, COLL, "nccl:all_reduce", data, ctrl, 30,
                [attr("is_cpu_op", "bool", False), attr("comm_type", "int64", comm_type),
                 attr("comm_size", size_kind, size)])


def two_ranks() -> tuple[bytes, bytes]:
    """Rank 0: compute 2 ms -> MEM_LOAD -> METADATA -> allreduce; a send beside it; compute 0.5 ms after both.
    Rank 1: compute 1 ms -> allreduce; the matching recv."""
    r0 = et(node(1, COMP, "fwd", micros=2000, attrs=[attr("is_cpu_op", "bool", False), attr("seq_id", "int64", -1),
                                                       attr("flops", "double", 1.5e9)]),
            node(2, MEM_LOAD, "load", data=[1], attrs=[attr("tensor_size", "uint64", 64)]),
            node(6, METADATA, "meta", ctrl=[2], attrs=[attr("dims", "int64_list", [1, 2])]),
            coll(3, ALL_REDUCE, 1 << 20, data=[6]),
            node(4, SEND, "send", data=[1], packed=False,
                 attrs=[attr("comm_src", "int32", 0), attr("comm_dst", "int32", 1), attr("comm_size", "int64", 1001),
                        attr("comm_tag", "int32", 7)]),
            node(5, COMP, "opt", data=[3], ctrl=[4], micros=500))
    r1 = et(node(1, COMP, "fwd", micros=1000),
            coll(3, ALL_REDUCE, 1 << 20, data=[1], size_kind="uint64"),
            node(4, RECV, "recv", ctrl=[1],
                 attrs=[attr("comm_src", "int32", 0), attr("comm_dst", "int32", 1),
                        attr("tensor_size", "uint64", 1001)]))
    return r0, r1


def write(tmp_path, *files: bytes, prefix="job") -> str:
    for r, data in enumerate(files):
        (tmp_path / f"{prefix}.{r}.et").write_bytes(data)
    return str(tmp_path / prefix)


# -- conversion --------------------------------------------------------------------------------------------


def test_two_ranks_convert_with_deps_through_dropped_nodes(tmp_path):
    doc, summary = C.convert([write(tmp_path, *two_ranks())])
    assert doc["ranks"] == 2 and doc["version"] == 1
    assert doc["ops"][0] == [
        {"id": "n1", "type": "compute", "seconds": 0.002, "deps": []},
        {"id": "n3", "type": "collective", "collective": "allreduce", "bytes": 1 << 20, "deps": ["n1"]},  # via 6, 2
        {"id": "n4", "type": "send", "peer": 1, "bytes": 1004, "deps": ["n1"]},
        {"id": "n5", "type": "compute", "seconds": 0.0005, "deps": ["n3", "n4"]}]
    assert doc["ops"][1] == [
        {"id": "n1", "type": "compute", "seconds": 0.001, "deps": []},
        {"id": "n3", "type": "collective", "collective": "allreduce", "bytes": 1 << 20, "deps": ["n1"]},
        {"id": "n4", "type": "recv", "peer": 0, "bytes": 1004, "deps": ["n1"]}]
    assert summary["dropped"] == {"MEM_LOAD_NODE": 1, "METADATA_NODE": 1}
    assert summary["sizes_rounded"] == 2          # the send and the recv: 1001 -> 1004
    # the allreduce waits for rank 0's 2 ms through the dropped nodes, then 0.5 ms: 2.5 ms in a zero-time
    # network (1.5 ms if the MEM_LOAD/METADATA chain had cut the dependency)
    assert summary["compute_only_step_s"] == pytest.approx(0.0025)


def test_round_trip_compiles_and_checks(tmp_path):
    doc, _ = C.convert([write(tmp_path, *two_ranks())], iterations=2)
    tr = T.load_trace(json.loads(json.dumps(doc)))
    sched, groups = T.compile_trace(tr)
    assert [g.id for g in groups[0]] == ["n1", "n3", "n4", "n5"] * 2
    stats = T.check(tr)
    assert stats["time_s"] == pytest.approx(0.005)
    assert stats["sent_elements"][0] == 2 * ((1 << 20) // 4 // 2 * 2 + 1004 // 4)    # ring 2(n-1)/n + the p2p


def test_files_given_in_any_order_take_their_rank_from_the_name(tmp_path):
    write(tmp_path, *two_ranks())
    a, _ = C.convert([str(tmp_path / "job.1.et"), str(tmp_path / "job.0.et")])
    b, _ = C.convert([str(tmp_path / "job")])
    assert a["ops"] == b["ops"]
    assert C.rank_files([str(tmp_path / "job")]) == [tmp_path / "job.0.et", tmp_path / "job.1.et"]


def test_gzip_and_jsonizer_forms_convert_alike(tmp_path):
    r0, r1 = two_ranks()
    (tmp_path / "z.0.et.gz").write_bytes(gzip.compress(r0))
    (tmp_path / "z.1.json").write_text(_jsonizer())
    assert C.convert([str(tmp_path / "z")])[0]["ops"] == C.convert([write(tmp_path, r0, r1)])[0]["ops"]


def _jsonizer() -> str:
    """Rank 1 of two_ranks() as chakra_jsonizer writes it: MessageToJson objects back to back (camelCase,
    64-bit integers as strings, enums by name, GlobalMetadata first)."""
    objs = [{"version": "0.0.4", "attr": [{"name": "schema", "stringVal": "1.0.2-chakra.0.0.4"}]},
            {"id": "1", "name": "fwd", "type": "COMP_NODE", "startTimeMicros": "12345", "durationMicros": "1000"},
            {"id": "3", "name": "nccl:all_reduce", "type": "COMM_COLL_NODE", "dataDeps": ["1"],
             "durationMicros": "30", "attr": [{"name": "is_cpu_op", "boolVal": False},
                                              {"name": "comm_type", "int64Val": "0"},
                                              {"name": "comm_size", "uint64Val": str(1 << 20)}]},
            {"id": "4", "name": "recv", "type": "COMM_RECV_NODE", "ctrlDeps": ["1"],
             "attr": [{"name": "comm_src", "int32Val": 0}, {"name": "comm_dst", "int32Val": 1},
                      {"name": "tensor_size", "uint64Val": "1001"}]}]
    return "".join(json.dumps(o, indent=2) for o in objs)


def test_barrier_and_cpu_side_comm_nodes(tmp_path):
    def rank():
        return et(node(1, COLL, "c10d::allreduce_", micros=40, attrs=[attr("is_cpu_op", "bool", True)]),
                  coll(2, BARRIER, 0, data=[1]),
                  coll(3, ALL_GATHER, 6, data=[2], size_kind="sint64"))
    doc, summary = C.convert([write(tmp_path, rank(), rank())])
    assert doc["ops"][0] == [{"id": "n1", "type": "compute", "seconds": 0.00004, "deps": []},
                             {"id": "n2", "type": "collective", "collective": "allreduce", "bytes": 8, "deps": ["n1"]},
                             {"id": "n3", "type": "collective", "collective": "all_gather", "bytes": 8,
                              "deps": ["n2"]}]
    assert summary["cpu_comm_as_compute"] == 2 and summary["sizes_rounded"] == 2


def test_ctrl_deps_outside_the_file_or_on_itself_are_ignored_but_cycles_are_named(tmp_path):
    ok = et(node(1, COMP, micros=10, ctrl=[99, 1]), node(2, COMP, micros=10, data=[1], ctrl=[1]))
    doc, summary = C.convert([write(tmp_path, ok, ok)])
    assert doc["ops"][0][1]["deps"] == ["n1"] and summary["ctrl_deps_ignored"] == 4
    loop = et(node(1, COMP, micros=10, ctrl=[2]), node(2, COMP, micros=10, data=[1]))
    with pytest.raises(SpecError) as err:
        C.convert([write(tmp_path, loop, loop, prefix="loop")])
    assert "node 1 ctrl_deps: dependency cycle 1 -> 2 -> 1" in str(err.value) and "--data-deps-only" in str(err.value)
    doc, summary = C.convert([str(tmp_path / "loop")], ctrl_deps=False)
    assert doc["ops"][0][1]["deps"] == ["n1"] and summary["ctrl_deps_ignored"] == 2


# -- malformed input: one SpecError naming the file, the node and the field ------------------------------


def _bad(tmp_path, rank0: bytes, rank1: bytes | None = None) -> SpecError:
    prefix = write(tmp_path, rank0, rank1 if rank1 is not None else two_ranks()[1], prefix="bad")
    with pytest.raises(SpecError) as err:
        C.convert([prefix])
    return err.value


@pytest.mark.parametrize("rank0,words", [
    (et(node(1, COMP, micros=5)) + b"\x80", ["bad.0.et", "truncated varint"]),
    (et(node(1, COMP, micros=5))[:-3], ["bad.0.et", "truncated"]),
    (varint(50) + b"\x08", ["bad.0.et", "50 bytes", "truncated"]),
    (et(blob(1, b"x")), ["bad.0.et", "node ? id", "wire type 2"]),
    (et(node(1, COMP) + tag(3, 3)), ["bad.0.et", "node 1", "wire type 3"]),
    (et(coll(3, 42, 4096)), ["bad.0.et", "node 3 attr comm_type", "42"]),
    (et(coll(3, REDUCE, 4096)), ["bad.0.et", "node 3 attr comm_type", "REDUCE is not replayable"]),
    (et(coll(3, ALL_REDUCE, -8)), ["node 3 attr comm_size", "non-negative"]),
    (et(node(3, COLL, attrs=[attr("comm_size", "int64", 64)])), ["node 3 (COMM_COLL_NODE) attr comm_type", "missing"]),
    (et(node(4, SEND, attrs=[attr("comm_size", "int64", 64)])), ["node 4", "comm_dst", "missing"]),
    (et(node(4, SEND, attrs=[attr("comm_dst", "int32", 0), attr("comm_size", "int64", 8)])), ["node 4 attr comm_dst"]),
    (et(node(4, SEND, attrs=[attr("comm_src", "int32", 1), attr("comm_dst", "int32", 1)])), ["node 4 attr comm_src"]),
    (et(node(1, COMP), node(1, COMP)), ["node 1 id", "twice"]),
    (et(node(1, COMP, data=[7])), ["node 1 data_deps", "node 7 is not in the file"]),
    (et(node(1, COMP, data=[1])), ["node 1 data_deps", "itself"]),
    (et(node(1, 12)), ["node 1 type", "12"]),
    (et(node(1, COMP, micros=4_000_000_000)), ["node 1 duration_micros"]),
    (b"", ["bad.0.et", "empty"]),
    (b"\x1f\x8b\x08\x00garbage", ["bad.0.et", "gzip"]),
    (b'{"workload_graph": [{"Id": 1}]}', ["bad.0.et", "workload_graph[0]", "NodeType"]),
    (b'{"id": "x", "type": "COMP_NODE"}', ["bad.0.et", "id", "integer"]),
], ids=["varint", "message", "metadata", "wire-type", "group", "comm-type", "reduce", "negative-size", "no-comm-type",
        "no-comm-dst", "send-to-self", "comm-src", "duplicate-id", "missing-dep", "self-dep", "node-type",
        "duration", "empty", "gzip", "feeder-json", "jsonizer-json"])
def test_malformed_files_are_refused_with_file_node_and_field(tmp_path, rank0, words):
    msg = str(_bad(tmp_path, rank0))
    for w in words:
        assert w in msg, msg


def test_converted_trace_that_fails_the_check_is_refused(tmp_path):
    r0, r1 = two_ranks()
    # rank 1 calls an all_gather where rank 0 calls the allreduce
    other = et(node(1, COMP, micros=1000), coll(3, ALL_GATHER, 1 << 20, data=[1]),
               node(4, RECV, ctrl=[1], attrs=[attr("comm_src", "int32", 0), attr("comm_size", "int64", 1004)]))
    msg = str(_bad(tmp_path, r0, other))
    assert "bad.1.et" in msg and "collective #1 differs" in msg and "node 3 (all_gather" in msg
    # a send without its recv
    lonely = et(node(1, COMP, micros=1000), coll(3, ALL_REDUCE, 1 << 20, data=[1]))
    msg = str(_bad(tmp_path, r0, lonely))
    assert "bad.0.et" in msg and "node 4" in msg and "not paired" in msg
    # both ranks wait to receive before they send: paired, but a deadlock the simulation finds
    def waits_first(peer):
        return et(node(1, RECV, attrs=[attr("comm_src", "int32", peer), attr("comm_size", "int64", 64)]),
                  node(2, SEND, data=[1], attrs=[attr("comm_dst", "int32", peer), attr("comm_size", "int64", 64)]))
    msg = str(_bad(tmp_path, waits_first(1), waits_first(0)))
    assert "bad.0.et node 1:" in msg and "cannot complete" in msg and "deadlock" in msg


def test_prefix_problems(tmp_path):
    with pytest.raises(SpecError, match="no <prefix>.<rank>.et files"):
        C.rank_files([str(tmp_path / "none")])
    write(tmp_path, two_ranks()[0])
    with pytest.raises(SpecError, match="at least 2 ranks"):
        C.rank_files([str(tmp_path / "job")])
    (tmp_path / "job.2.et").write_bytes(two_ranks()[1])
    with pytest.raises(SpecError, match="rank 1 has no file"):
        C.rank_files([str(tmp_path / "job")])


# -- real files written by Chakra's tools (tests/data/chakra/README.md) -----------------------------------


def test_real_et_file_decodes_as_chakras_own_json_says():
    """The protobuf head of Chakra's feeder test trace and the JSON of the same nodes agree field by field."""
    binary = {n.id: n for n in C.read_nodes(DATA / "feeder_trace_head.0.et.gz")}
    graph = json.loads((DATA / "small_chakra.0.json").read_text())["workload_graph"]
    assert len(binary) == 12 and len(graph) == 7
    for j in graph:
        b = binary[j["Id"]]
        assert (b.type, list(b.data_deps), list(b.ctrl_deps), b.duration_micros, b.attrs["is_cpu_op"]) == \
            (j["NodeType"], j["data_deps"], j["ctrlDeps"], j["runtime"], j["is_cpu_op"])
        if "Id" not in j["Name"]:        # that JSON's kernel names went through an "id" -> "Id" replacement
            assert b.name == j["Name"]
    assert binary[435].attrs["comm_type"] == BROADCAST and binary[435].attrs["comm_size"] == 212480
    assert binary[216].attrs["seq_id"] == -1          # a negative int64: a 10-byte varint


def test_real_et_file_converts_and_checks(tmp_path):
    for r in (0, 1):          # data parallel: every rank runs the same graph
        shutil.copy(DATA / "feeder_trace_head.0.et.gz", tmp_path / f"rn.{r}.et.gz")
    doc, summary = C.convert([str(tmp_path / "rn")])
    kinds = [(o["id"], o["type"], o.get("bytes")) for o in doc["ops"][0]]
    assert [k for k in kinds if k[1] == "collective"] == [("n435", "collective", 212480), ("n622", "collective", 424)]
    assert len(kinds) == 12 and summary["cpu_comm_as_compute"] == 8     # c10d::broadcast_ host calls, 4 per rank
    assert next(o for o in doc["ops"][0] if o["id"] == "n435")["deps"] == ["n216", "n217", "n432"]
    T.check(T.load_trace(doc))


def test_feeder_json_without_comm_attributes_is_refused_at_its_node(tmp_path):
    for r in (0, 1):
        shutil.copy(DATA / "small_chakra.0.json", tmp_path / f"small.{r}.json")
    with pytest.raises(SpecError) as err:
        C.convert([str(tmp_path / "small")])
    assert "node 435 (COMM_COLL_NODE) attr comm_type: missing" in str(err.value)


# -- the CLI -------------------------------------------------------------------------------------------


def test_cli_writes_a_trace_the_trace_command_accepts(tmp_path, run_cli):
    out = tmp_path / "t.json"
    code, stdout, err = run_cli(["collective", "chakra", write(tmp_path, *two_ranks()), "-o", str(out), "--json"])
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["ranks"] == 2 and summary["ops_per_rank"]["collective"] == [1, 1]
    code, stdout, _ = run_cli(["collective", "trace", str(out), "--json"])
    assert code == 0 and json.loads(stdout)["ok"]


def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, run_cli):
    out = tmp_path / "t.json"
    prefix = write(tmp_path, et(coll(3, 42, 4096)), two_ranks()[1])
    code, _, err = run_cli(["collective", "chakra", prefix, "-o", str(out)])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "node 3 attr comm_type" in err
    assert "Traceback" not in err and not out.exists()
    code, _, err = run_cli(["collective", "chakra", prefix, "-o", str(out), "--iterations", "0"])
    assert code == 2 and "--iterations" in err and not out.exists()
