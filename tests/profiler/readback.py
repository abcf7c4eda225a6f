"""Read a store back into plain structures for profiler tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baml_studio.format.cas import CODEC_FUNCTION_TABLE
from baml_studio.format.cct import merge_cct
from baml_studio.format.function_table import FunctionTable, decode_function_table
from baml_studio.format.ids import ThreadRef
from baml_studio.format.records import (
    CctSection,
    EngineStarted,
    Fact,
    MetaSegment,
    RootEnded,
    RootStarted,
    ValueAvailable,
)
from baml_studio.format.values import decode_value, to_json
from baml_studio.store import StoreReader


@dataclass
class ExecutionView:
    root: ThreadRef
    started: RootStarted | None = None
    ended: RootEnded | None = None
    started_meta_seq: int = 0
    ended_meta_seq: int = 0
    facts: list[Fact] = field(default_factory=list)
    cct: list[CctSection] = field(default_factory=list)

    def of(self, kind: type) -> list[Any]:
        return [f for f in self.facts if isinstance(f, kind)]

    def merged_cct(self) -> CctSection:
        return merge_cct(self.cct)


@dataclass
class StoreView:
    root: Path
    reader: StoreReader
    meta: list[MetaSegment]
    engines: list[EngineStarted]
    executions: dict[ThreadRef, ExecutionView]

    def only(self) -> ExecutionView:
        assert len(self.executions) == 1, list(self.executions)
        return next(iter(self.executions.values()))

    def value(self, state: Any) -> Any:
        assert isinstance(state, ValueAvailable), state
        obj = self.reader.read_cas(state.cid)
        assert obj.codec == 1 and len(obj.body) == state.encoded_bytes
        return to_json(decode_value(obj.body))

    def function_table(self, engine: EngineStarted) -> FunctionTable:
        assert engine.function_table_cid is not None
        obj = self.reader.read_cas(engine.function_table_cid)
        assert obj.codec == CODEC_FUNCTION_TABLE
        return decode_function_table(obj.body)


def load(root: Path) -> StoreView:
    reader = StoreReader(root)
    metas: list[MetaSegment] = []
    engines: list[EngineStarted] = []
    executions: dict[ThreadRef, ExecutionView] = {}
    for euid in reader.list_streams():
        for seq in reader.meta_sequences(euid):
            seg = reader.read_meta(euid, seq)
            metas.append(seg)
            for rec in seg.records:
                if isinstance(rec, EngineStarted):
                    engines.append(rec)
                elif isinstance(rec, RootStarted):
                    view = executions.setdefault(rec.root, ExecutionView(rec.root))
                    view.started, view.started_meta_seq = rec, seq
                elif isinstance(rec, RootEnded):
                    view = executions.setdefault(rec.root, ExecutionView(rec.root))
                    view.ended, view.ended_meta_seq = rec, seq
        for seq in reader.data_sequences(euid):
            for group in reader.read_data(euid, seq).groups:
                view = executions.setdefault(group.root, ExecutionView(group.root))
                view.facts.extend(group.evidence)
                view.cct.append(group.cct)
    return StoreView(root, reader, metas, engines, executions)
