"""An in-memory CatalogSource with hand-built catalog v1 tables and CAS value bodies.

It records every ``tables`` call (relations and execution ids) and every value read, and can
serve broken bodies, so the engine's pushdown, hydration and counting can be checked exactly.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Collection
from typing import Any

import pyarrow as pa

from baml_studio.catalog.handles import LOSS_NOT_CAPTURED, Available, Unavailable, encode_handle
from baml_studio.catalog.schema import BY_NAME, Relation
from baml_studio.catalog.source import Snapshot, ValueUnavailable
from baml_studio.format.records import ValueLossReason
from baml_studio.format.values import Value, encode_python, encode_value

E1 = "baml_thread_1_" + "1" * 32
E2 = "baml_thread_1_" + "2" * 32
E3 = "baml_thread_1_" + "3" * 32
SNAPSHOT = Snapshot(catalog_version="v1", generation="ab" * 32, projected_through=7)


def _default(relation: Relation, name: str) -> Any:
    column = relation.column(name)
    if column.nullable:
        return None
    t = column.type
    if pa.types.is_string(t):
        return ""
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_list(t):
        return []
    return 0


class FakeSource:
    """A CatalogSource over rows added with :meth:`add` and bodies added with :meth:`value`."""

    def __init__(self, snapshot: Snapshot = SNAPSHOT) -> None:
        self._snapshot = snapshot
        self.rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.bodies: dict[bytes, bytes] = {}
        self.table_calls: list[tuple[tuple[str, ...], tuple[str, ...] | None]] = []
        self.reads: list[bytes] = []
        self.fail_snapshot: Exception | None = None

    # -- building ---------------------------------------------------------------------------

    def add(self, relation: str, **values: Any) -> dict[str, Any]:
        rel = BY_NAME[relation]
        unknown = set(values) - {c.name for c in rel.columns}
        if unknown:
            raise KeyError(f"{relation} has no columns {sorted(unknown)}")
        row = {c.name: values.get(c.name, _default(rel, c.name)) for c in rel.columns}
        self.rows[relation].append(row)
        return row

    def body(self, body: bytes, codec: int = 1) -> tuple[bytes, str]:
        """Store a raw body; its handle and ``bamlv_1_`` CID text."""
        cid = hashlib.sha256(codec.to_bytes(2, "big") + body).digest()
        self.bodies[cid] = body
        return encode_handle(Available(codec, cid)), "bamlv_1_" + cid.hex()

    def value(self, obj: object) -> tuple[bytes, str]:
        """Store a value (a model ``Value`` or plain Python data)."""
        body = encode_value(obj) if _is_value(obj) else encode_python(obj)
        return self.body(body)

    def call(self, execution_id: str, call_id: str, **values: Any) -> dict[str, Any]:
        """A calls_v1 row; ``args``/``output``/``error`` may be Python data, a Value, a
        ready handle (``bytes``), or ``LOST``/``NOT_CAPTURED``."""
        for role in ("args", "output", "error"):
            if role in values:
                handle, cid, state = self._role(values.pop(role))
                values[role], values[f"{role}_cid"], values[f"{role}_state"] = handle, cid, state
            else:
                values.setdefault(f"{role}_state", "not_applicable")
        values.setdefault("thread_id", execution_id)
        return self.add("calls_v1", execution_id=execution_id, call_id=call_id, **values)

    def _role(self, obj: object) -> tuple[bytes, str | None, str]:
        if obj is LOST:
            return encode_handle(Unavailable(ValueLossReason.COPY_FAILED)), None, "lost:copy_failed"
        if obj is NOT_CAPTURED:
            return encode_handle(Unavailable(LOSS_NOT_CAPTURED)), None, "not_captured"
        if obj is TOO_LARGE:
            handle = encode_handle(Unavailable(ValueLossReason.VALUE_TOO_LARGE))
            return handle, None, "lost:value_too_large"
        if isinstance(obj, bytes):
            return obj, None, "available"
        handle, cid = self.value(obj)
        return handle, cid, "available"

    # -- CatalogSource ----------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        if self.fail_snapshot is not None:
            raise self.fail_snapshot
        return self._snapshot

    def execution_ids(self) -> list[str]:
        """Every execution any per-execution row belongs to (a real store lists them all)."""
        return sorted(
            {r["execution_id"] for rows in self.rows.values() for r in rows if "execution_id" in r}
        )

    def tables(
        self, relations: Collection[str], execution_ids: Collection[str] | None
    ) -> dict[str, pa.Table]:
        ids = None if execution_ids is None else tuple(execution_ids)
        self.table_calls.append((tuple(relations), ids))
        out = {}
        for name in relations:
            rel = BY_NAME[name]
            rows = self.rows[name]
            if ids is not None and "execution_id" in {c.name for c in rel.columns}:
                rows = [r for r in rows if r["execution_id"] in ids]
            out[name] = pa.Table.from_pylist(rows, schema=rel.schema())
        return out

    def read_value(self, codec: int, cid: bytes, max_bytes: int) -> bytes:
        self.reads.append(cid)
        if codec != 1:
            raise ValueUnavailable("unsupported")
        if cid not in self.bodies:
            raise ValueUnavailable("lost", "no CAS object")
        body = self.bodies[cid]
        if len(body) > max_bytes:
            raise ValueUnavailable("truncated")
        return body


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


LOST = _Marker("LOST")
NOT_CAPTURED = _Marker("NOT_CAPTURED")
TOO_LARGE = _Marker("TOO_LARGE")


def _is_value(obj: object) -> bool:
    return isinstance(obj, Value)  # type: ignore[arg-type]  # reason: Value is a union of classes


def relations_called(source: FakeSource) -> set[str]:
    return {name for names, _ in source.table_calls for name in names}


def standard() -> FakeSource:
    """Two executions with threads, call paths, calls whose values cover every case, errors,
    function definitions and health rows. Call ids say what their ``args`` hold."""
    from baml_studio.format.values import Class, Enum, Float, Int, List, Map, String

    s = FakeSource()
    t0 = 1_767_225_600_123_456_789  # 2026-01-01T00:00:00.123456789Z
    for i, e in enumerate((E1, E2)):
        s.add(
            "threads_v1",
            execution_id=e,
            thread_id=e,
            kind="root",
            started_ns=10 + i,
            started_at=t0 + i,
            status="succeeded",
            total_errors=i,
            entry_fqn="Main",
        )
    s.add(
        "threads_v1",
        execution_id=E1,
        thread_id="baml_thread_1_" + "9" * 32,
        parent_thread_id=E1,
        kind="spawn",
        started_ns=20,
        name="worker",
        spawn_fqn="Main",
        end_status="completed",
    )
    for e, fqn, self_ns in ((E1, "ScoreCustomer", 500), (E1, "Main", 100), (E2, "Main", 700)):
        s.add(
            "call_path_stats_v1",
            execution_id=e,
            call_path_id=f"{e}:{fqn}",
            fqn=fqn,
            self_ns=self_ns,
            inclusive_ns=self_ns * 2,
            calls_started=3,
            timing_complete=True,
            edge_kind="call",
        )
    customer = Class(
        "Customer", (("name", String("Ann")), ("age", Int(30)), ("tier", Enum("Tier", "GOLD")))
    )
    output = Map((("score", Float(0.9)), ("tags", List((String("a"), String("b"))))))
    s.call(
        E1,
        "c_int30",
        fqn="ScoreCustomer",
        args=Map((("customer", customer),)),
        output=output,
        status="ok",
        started_ns=1,
        duration_ns=5,
    )
    s.call(
        E1,
        "c_float45",
        fqn="ScoreCustomer",
        args={"customer": {"age": 45.5, "name": "Bo"}},
        output=[1, 2, 3],
        status="ok",
        started_ns=2,
        duration_ns=7,
    )
    s.call(
        E1,
        "c_string_age",
        fqn="ScoreCustomer",
        args={"customer": {"age": "old"}},
        output="plain text",
        status="ok",
        started_ns=3,
    )
    s.call(
        E1,
        "c_no_age",
        fqn="ScoreCustomer",
        args={"customer": {"name": "Cy"}},
        output=None,
        status="ok",
        started_ns=4,
    )
    s.call(
        E2,
        "c_null_age",
        fqn="ScoreCustomer",
        args={"customer": {"age": None}},
        output=42,
        status="ok",
        started_ns=5,
    )
    s.call(
        E2,
        "c_lost",
        fqn="ScoreCustomer",
        args=LOST,
        output=True,
        status="errored",
        error={"message": "boom"},
        error_id=f"{E2}#1",
        started_ns=6,
    )
    s.call(E2, "c_not_captured", fqn="Other", args=NOT_CAPTURED, status="ok", started_ns=7)
    s.call(E2, "c_int60", fqn="Other", args={"customer": {"age": 60}}, status="ok", started_ns=8)
    err_handle, err_cid = s.value({"message": "boom", "code": 7})
    s.add(
        "errors_v1",
        execution_id=E2,
        error_id=f"{E2}#1",
        throw_call_id="c_lost",
        throw_thread_id=E2,
        kind="fresh",
        source="bytecode",
        value_state="available",
        value_cid=err_cid,
        value=err_handle,
        stack=["Main", "ScoreCustomer"],
        terminal_call_ids=["c_lost"],
    )
    s.add(
        "function_definitions_v1",
        program_id="p" * 32,
        function_id=1,
        fqn="Main",
        display_name="Main",
        kind="bytecode",
        origin="user",
        namespace="",
    )
    s.add("health_v1", execution_id=E1, metric="calls_started", plane="execution", value=12)
    s.add("health_v1", execution_id=E2, metric="calls_started", plane="execution", value=3)
    return s
