"""Collect one execution's facts from its data groups, in sequence order, and check the
dependency rule (reference facts §3.3).

A ``ContextRef::Normal(key)`` must resolve to a context *defined* (with its tuple) in the same
group's CCT section or an earlier group's; a SpanStart must precede the facts about its call;
an ErrorCapture must precede the TerminalErrorRefs pointing at it. A dangling reference is
reported as ``UnresolvedDependency`` (the data state becomes incomplete) and the fact is still
used where it can be. The first of two facts about the same thing wins.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from baml_studio.format.cct import merge_cct
from baml_studio.format.errors import InvalidCct
from baml_studio.format.ids import CallRef, ThreadRef
from baml_studio.format.records import (
    CctSection,
    ContextRef,
    DataGroup,
    ErrorCapture,
    ErrorCaptureId,
    ErrorCaptureLossReason,
    NormalContext,
    SpanEnd,
    SpanRuntimeId,
    SpanStart,
    TerminalErrorRef,
    ThreadEnd,
    ThreadStart,
    ValueOccurrence,
    ValueRole,
    ValueState,
)


@dataclass(slots=True)
class Gathered:
    """One execution's facts, keyed for the row builders."""

    cct: CctSection = field(default_factory=CctSection)
    spans: dict[CallRef, SpanStart] = field(default_factory=dict)
    ends: dict[CallRef, SpanEnd] = field(default_factory=dict)
    runtime_ids: dict[CallRef, dict[int, bytes]] = field(default_factory=dict)
    values: dict[tuple[CallRef, ValueRole], ValueState] = field(default_factory=dict)
    captures: dict[ErrorCaptureId, ErrorCapture] = field(default_factory=dict)
    terminal: dict[CallRef, ErrorCaptureId | ErrorCaptureLossReason] = field(default_factory=dict)
    terminal_calls: dict[ErrorCaptureId, list[CallRef]] = field(default_factory=dict)
    thread_starts: dict[ThreadRef, ThreadStart] = field(default_factory=dict)
    thread_ends: dict[ThreadRef, ThreadEnd] = field(default_factory=dict)
    unresolved: bool = False
    corrupt_sequences: list[int] = field(default_factory=list)
    """Sequences whose CCT deltas could not be merged (a ContextKey with two tuples)."""


def gather(groups: Iterable[tuple[int, DataGroup]]) -> Gathered:
    out = Gathered()
    defined: set[bytes] = set()
    sections: list[tuple[int, CctSection]] = []
    for sequence, group in groups:
        sections.append((sequence, group.cct))
        defined.update(c.key for c in group.cct.contexts if c.tuple is not None)
        for fact in group.evidence:
            _take(out, fact, defined)
    out.cct = _merge(sections, out.corrupt_sequences)
    return out


def _resolves(ref: ContextRef, defined: set[bytes]) -> bool:
    return not isinstance(ref, NormalContext) or ref.key in defined


def _take(out: Gathered, fact: object, defined: set[bytes]) -> None:
    if isinstance(fact, SpanStart):
        out.unresolved |= not _resolves(fact.context, defined)
        out.spans.setdefault(fact.call, fact)
        if fact.runtime is not None:
            ids = out.runtime_ids.setdefault(fact.call, {})
            ids.setdefault(fact.runtime.annotation_ordinal, fact.runtime.runtime_id)
    elif isinstance(fact, SpanEnd):
        out.unresolved |= fact.call not in out.spans
        out.ends.setdefault(fact.call, fact)
    elif isinstance(fact, SpanRuntimeId):
        out.unresolved |= fact.call not in out.spans
        out.runtime_ids.setdefault(fact.call, {})[fact.annotation_ordinal] = fact.runtime_id
    elif isinstance(fact, ValueOccurrence):
        out.unresolved |= fact.call not in out.spans or not _resolves(fact.context, defined)
        out.values.setdefault((fact.call, fact.role), fact.value)
    elif isinstance(fact, ErrorCapture):
        out.unresolved |= not _resolves(fact.context, defined)
        out.captures.setdefault(fact.capture_id, fact)
    elif isinstance(fact, TerminalErrorRef):
        out.unresolved |= fact.call not in out.spans
        if fact.call in out.terminal:
            return
        out.terminal[fact.call] = fact.target
        if isinstance(fact.target, ErrorCaptureId):
            out.unresolved |= fact.target not in out.captures
            out.terminal_calls.setdefault(fact.target, []).append(fact.call)
    elif isinstance(fact, ThreadStart):
        out.thread_starts.setdefault(fact.thread, fact)
    elif isinstance(fact, ThreadEnd):
        out.thread_ends.setdefault(fact.thread, fact)


def _merge(sections: list[tuple[int, CctSection]], corrupt: list[int]) -> CctSection:
    """``merge_cct`` over every group; if two tuples share a ContextKey (only possible in
    hand-made inputs: decoding verifies every key against its tuple), merge group by group
    and leave out the groups that collide."""
    try:
        return merge_cct(section for _, section in sections)
    except InvalidCct:
        merged = CctSection()
        for sequence, section in sections:
            try:
                merged = merge_cct((merged, section))
            except InvalidCct:
                corrupt.append(sequence)
        return merged
