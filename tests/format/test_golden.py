"""Golden vectors from the reference facts (§3.2, §3.4, §4.1, §4.6), reproduced byte for byte.

The CCT payload and FunctionTableV1 fixtures are those of the reference implementation's own
golden tests (``cct_codec.rs`` / ``function_table.rs``); the program-id golden is the
length-framed formula over ``a.baml = b"alpha"`` and ``b.baml = b"beta"``.
"""

from __future__ import annotations

import hashlib

from baml_studio.format.cas import (
    CODEC_FUNCTION_TABLE,
    CODEC_VALUE,
    cas_relpath,
    decode_cas_object,
    encode_cas_object,
)
from baml_studio.format.cct import context_key, decode_cct_payload, encode_cct_payload
from baml_studio.format.function_table import (
    FunctionEntry,
    FunctionKind,
    FunctionOrigin,
    FunctionSpan,
    FunctionTable,
    SourceFile,
    decode_function_table,
    encode_function_table,
    function_table_cid,
)
from baml_studio.format.ids import (
    CallRef,
    ThreadRef,
    parse_runtime_id_wire,
    runtime_id_wire,
    value_cid,
)
from baml_studio.format.program import program_hash, program_id
from baml_studio.format.records import (
    CallSiteSpan,
    CctContext,
    CctCounters,
    CctSection,
    CctTuple,
    EdgeKind,
)

CONTEXT_KEY_GOLDEN = "a7ae20370bed3ef26edf6a067c9b14dae5feba1bc870eb5a4e4be55616034d9b"
CID_GOLDEN = "fe620b74bb3027bd1bba4d70cde577cb5b4e0238398f1d97df27dbcb14b29944"
CCT_PAYLOAD_GOLDEN = "571002989e5472f82280e134f87406b886f9348b4af4304e65ab88742ec8dd7f"
FUNCTION_TABLE_GOLDEN = "2df672d2dcdd5170932c4e167ae9f4608a6ae6015172231406b3fc7f2084912e"
PROGRAM_GOLDEN = "e98260b82b3b024bcc7d3b56fee3632a840cc8b05abf9ebcbd28882b16ef3049"
CID_BODY = b"\x00baml-value-body\xff"


def test_context_key_golden() -> None:
    tup = CctTuple(b"\x11" * 16, b"\x22" * 32, 0x01020304, CallSiteSpan(5, 6, 7, 8), EdgeKind.SPAWN)
    assert context_key(tup).hex() == CONTEXT_KEY_GOLDEN


def test_context_key_excludes_nothing_of_the_tuple() -> None:
    base = CctTuple(b"\x11" * 16, None, 7, None, EdgeKind.ROOT)
    variants = [
        CctTuple(b"\x12" * 16, None, 7, None, EdgeKind.ROOT),
        CctTuple(b"\x11" * 16, b"\x00" * 32, 7, None, EdgeKind.ROOT),
        CctTuple(b"\x11" * 16, None, 8, None, EdgeKind.ROOT),
        CctTuple(b"\x11" * 16, None, 7, CallSiteSpan(0, 0, 0, 0), EdgeKind.ROOT),
        CctTuple(b"\x11" * 16, None, 7, None, EdgeKind.CALL),
    ]
    keys = {context_key(base), *(context_key(v) for v in variants)}
    assert len(keys) == 6


def cct_fixture() -> CctSection:
    """One root context: program 0x11×16, FunctionId 7, site (1,2,3,4), edge Root, selected;
    ended Ok with inclusive 100 ns, await 20 ns over 2 awaits (``cct_codec.rs`` fixture)."""
    tup = CctTuple(b"\x11" * 16, None, 7, CallSiteSpan(1, 2, 3, 4), EdgeKind.ROOT)
    counters = CctCounters(
        invocations_started=1,
        spans_selected=1,
        completed_ok=1,
        inclusive_ns=100,
        direct_call_child_inclusive_ns=0,
        await_ns=20,
        await_count=2,
    )
    return CctSection(0, (CctContext(context_key(tup), tup, counters),))


def test_cct_payload_golden() -> None:
    payload = encode_cct_payload(cct_fixture())
    assert hashlib.sha256(payload).hexdigest() == CCT_PAYLOAD_GOLDEN
    assert len(payload) == 8 + 32 + 1 + 39 + 104 + 8  # tuple: 16+1+4+17+1
    assert decode_cct_payload(payload, 1, 0) == cct_fixture()


def test_value_cid_golden_and_codec_separation() -> None:
    assert value_cid(CODEC_VALUE, CID_BODY).hex() == CID_GOLDEN
    assert value_cid(CODEC_FUNCTION_TABLE, CID_BODY).hex() != CID_GOLDEN


def test_cas_object_carries_the_golden_cid() -> None:
    raw = encode_cas_object(CODEC_VALUE, CID_BODY)
    assert len(raw) == 84 + len(CID_BODY)
    obj = decode_cas_object(raw)
    assert (obj.codec, obj.cid.hex(), obj.body) == (CODEC_VALUE, CID_GOLDEN, CID_BODY)
    assert cas_relpath(obj.cid) == f"cas/sha256/fe/{CID_GOLDEN}.bamlvalue"


def function_table_fixture() -> FunctionTable:
    return FunctionTable(
        functions=(
            FunctionEntry(
                function_id=1,
                fqn="app.Score",
                display_name="Score",
                definition_key="function:app.Score",
                kind=FunctionKind.BYTECODE,
                origin=FunctionOrigin.USER,
                source_file="app.baml",
                source_span=FunctionSpan(3, 10, 90),
                package_name="app",
                namespace=("inner",),
            ),
            FunctionEntry(
                function_id=2,
                fqn="baml.sys.print",
                display_name="print",
                kind=FunctionKind.SYSOP,
                kind_detail="print",
                origin=FunctionOrigin.BUILTIN,
            ),
        ),
        files=(SourceFile(3, "app.baml"),),
    )


def test_function_table_golden() -> None:
    body = encode_function_table(function_table_fixture())
    assert hashlib.sha256(body).hexdigest() == FUNCTION_TABLE_GOLDEN
    assert decode_function_table(body) == function_table_fixture()
    assert function_table_cid(function_table_fixture()) == value_cid(CODEC_FUNCTION_TABLE, body)
    table = function_table_fixture()
    assert table.function(2) is table.functions[1] and table.function(3) is None
    assert table.file_path(3) == "app.baml" and table.file_path(1) is None
    assert [FunctionKind(k).sql for k in range(4)] == [
        "bytecode",
        "sysop",
        "native",
        "native_unresolved",
    ]
    assert [o.sql for o in FunctionOrigin] == [
        "user",
        "companion",
        "internal",
        "builtin",
        "auto_derive",
    ]


def test_program_id_golden_is_order_independent() -> None:
    files = {"b.baml": b"beta", "a.baml": b"alpha"}
    assert program_hash("0.17.0", files).hex() == PROGRAM_GOLDEN
    assert program_hash("0.17.0", dict(reversed(files.items()))).hex() == PROGRAM_GOLDEN
    assert program_id("0.17.0", files).hex() == PROGRAM_GOLDEN[:32]


def test_program_hash_is_byte_and_boundary_sensitive() -> None:
    base = program_hash("0.17.0", {"a.baml": b"alpha", "b.baml": b"beta"})
    assert program_hash("0.17.0", {"a.baml": b"alpha ", "b.baml": b"beta"}) != base
    assert program_hash("0.17.0", {"a2.baml": b"alpha", "b.baml": b"beta"}) != base
    assert program_hash("0.17.1", {"0a.baml": b"same"}) != program_hash(
        "0.17.10", {"a.baml": b"same"}
    )
    assert program_hash("0.17.0", {"a\0b.baml": b"c"}) != program_hash(
        "0.17.0", {"a.baml": b"\0bc"}
    )


def test_runtime_id_wire_golden() -> None:
    wire = runtime_id_wire(bytes([11] * 16))
    assert wire == "baml_id_1_CwsLCwsLCwsLCwsLCwsLCw"
    assert len(wire) == 32
    assert parse_runtime_id_wire(wire) == bytes([11] * 16)


def test_thread_and_call_wire_ids() -> None:
    thread = ThreadRef(bytes(range(16)), 1, 2)
    call = CallRef(thread, 1)
    assert len(thread.wire()) == 58 and thread.wire().startswith("baml_thread_1_")
    assert len(call.wire()) == 67 and call.wire().startswith("baml_call_1_")
    assert ThreadRef.parse_wire(thread.wire()) == thread
    assert CallRef.parse_wire(call.wire()) == call
    extreme = ThreadRef(b"\xff" * 16, (1 << 64) - 1, (1 << 64) - 1)
    assert ThreadRef.parse_wire(extreme.wire()) == extreme
