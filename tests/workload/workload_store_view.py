"""Read a profiles-v1 store written by the workload into plain facts the tests compare with the
report: per execution its status, stream, root input and terminal error; CCT call totals per
function; and the captured values' sizes."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baml_studio.format.function_table import decode_function_table
from baml_studio.format.ids import CallRef, ThreadRef
from baml_studio.format.records import (
    EdgeKind,
    ErrorCapture,
    ErrorCaptureId,
    RootStatus,
    SpanStart,
    TerminalErrorRef,
    ValueAvailable,
    ValueOccurrence,
    ValueRole,
)
from baml_studio.format.values import decode_value, to_json
from baml_studio.store import StoreReader, StoreScan


@dataclass
class ExecutionView:
    root: ThreadRef
    status: RootStatus
    root_call: CallRef | None = None
    root_input: dict[str, Any] | None = None
    root_error: dict[str, Any] | None = None
    calls: Counter[str] = field(default_factory=Counter)


@dataclass
class StoreView:
    scan: StoreScan
    executions: dict[ThreadRef, ExecutionView]
    value_sizes: list[int]
    """``encoded_bytes`` of every available ValueOccurrence and ErrorCapture."""
    large_cas_files: list[Path]

    def by_request_id(self) -> dict[str, ExecutionView]:
        return {
            str(view.root_input["request_id"]): view
            for view in self.executions.values()
            if view.root_input is not None
        }

    def calls_by_function(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for view in self.executions.values():
            total.update(view.calls)
        return dict(total)


def _value(reader: StoreReader, state: object) -> Any:
    assert isinstance(state, ValueAvailable), state
    return to_json(decode_value(reader.read_cas(state.cid).body))


def load(root: Path, *, large_bytes: int) -> StoreView:
    reader = StoreReader(root)
    scan = reader.scan()
    tables: dict[tuple[bytes, int], dict[int, str]] = {}
    executions: dict[ThreadRef, ExecutionView] = {}
    for report in scan.executions:
        assert report.ended is not None, f"{report.root} has no RootEnded"
        executions[report.root] = ExecutionView(report.root, report.ended.status)
        engine = report.engine
        key = (report.root.euid, report.root.engine)
        if engine is not None and key not in tables:
            assert engine.function_table_cid is not None
            table = decode_function_table(reader.read_cas(engine.function_table_cid).body)
            tables[key] = {f.function_id: f.fqn for f in table.functions}
    function_of_key: dict[bytes, int] = {}
    invocations: dict[ThreadRef, Counter[bytes]] = defaultdict(Counter)
    captures: dict[ErrorCaptureId, ErrorCapture] = {}
    terminal: dict[CallRef, ErrorCaptureId] = {}
    value_sizes: list[int] = []
    for euid in reader.list_streams():
        for sequence in reader.data_sequences(euid):
            for group in reader.read_data(euid, sequence).groups:
                view = executions[group.root]
                for context in group.cct.contexts:
                    if context.tuple is not None:
                        function_of_key[context.key] = context.tuple.function_id
                    invocations[group.root][context.key] += context.counters.invocations_started
                for fact in group.evidence:
                    if isinstance(fact, SpanStart) and fact.edge_kind == EdgeKind.ROOT:
                        view.root_call = fact.call
                    elif isinstance(fact, ValueOccurrence | ErrorCapture):
                        if isinstance(fact.value, ValueAvailable):
                            value_sizes.append(fact.value.encoded_bytes)
                        if isinstance(fact, ErrorCapture):
                            captures[fact.capture_id] = fact
                        elif fact.role == ValueRole.INPUT and fact.call == view.root_call:
                            view.root_input = _value(reader, fact.value)
                    elif isinstance(fact, TerminalErrorRef):
                        assert isinstance(fact.target, ErrorCaptureId), fact
                        terminal[fact.call] = fact.target
    for thread, view in executions.items():
        names = tables[(thread.euid, thread.engine)]
        for key, count in invocations[thread].items():
            view.calls[names[function_of_key[key]]] += count
        if view.root_call is not None and view.root_call in terminal:
            capture = captures[terminal[view.root_call]]
            view.root_error = _value(reader, capture.value)
    large = [
        path
        for path in (root / "cas" / "sha256").glob("*/*.bamlvalue")
        if path.stat().st_size > large_bytes
    ]
    return StoreView(scan, executions, value_sizes, large)
