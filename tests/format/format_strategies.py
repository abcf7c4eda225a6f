"""Hypothesis strategies for every profiles-v1 record, fact, section and segment."""

from __future__ import annotations

from hypothesis import strategies as st

from baml_studio.format.cct import context_key
from baml_studio.format.function_table import (
    FunctionEntry,
    FunctionKind,
    FunctionOrigin,
    FunctionSpan,
    FunctionTable,
    SourceFile,
)
from baml_studio.format.ids import CallRef, ThreadRef
from baml_studio.format.records import (
    HEALTH_FIELDS,
    CallSiteSpan,
    CctContext,
    CctCounters,
    CctOverflow,
    CctSection,
    CctTuple,
    DataGroup,
    DataSegment,
    EdgeKind,
    EngineStarted,
    ErrorCapture,
    ErrorCaptureId,
    ErrorCaptureLossReason,
    ErrorKind,
    ErrorSource,
    ExecutionHealth,
    Fact,
    FunctionEndStatus,
    MetaSegment,
    NormalContext,
    OverflowContext,
    OverflowReason,
    RootEnded,
    RootStarted,
    RootStatus,
    RuntimeAnnotation,
    SpanEnd,
    SpanRuntimeId,
    SpanStart,
    StreamStarted,
    TerminalErrorRef,
    ThreadEnd,
    ThreadEndStatus,
    ThreadKind,
    ThreadStart,
    ThrowSite,
    ValueAvailable,
    ValueLossReason,
    ValueLost,
    ValueOccurrence,
    ValueRole,
)

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFF_FFFF)
u64 = st.integers(0, (1 << 64) - 1)
u128 = st.integers(0, (1 << 128) - 1)
small = st.integers(0, 5)
b16 = st.binary(min_size=16, max_size=16)
b32 = st.binary(min_size=32, max_size=32)
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=24)
bits3 = st.integers(0, 7)

euids = st.sampled_from([b"\x01" * 16, b"\x02" * 16]) | b16
thread_refs = st.builds(ThreadRef, euids, small | u64, small | u64)
call_refs = st.builds(CallRef, thread_refs, small | u64)
call_sites = st.builds(CallSiteSpan, u32, u32, u32, u32)
throw_sites = st.builds(ThrowSite, u32, u32, u32, u32)

# --- CCT --------------------------------------------------------------------------------------

cct_tuples = st.builds(
    CctTuple, b16, st.none() | b32, u32, st.none() | call_sites, st.sampled_from(EdgeKind)
)
cct_counters = st.builds(CctCounters, u64, u64, u64, u64, u64, u64, u128, u128, u128, u64)


@st.composite
def cct_contexts(draw: st.DrawFn) -> CctContext:
    if draw(st.booleans()):
        tup = draw(cct_tuples)
        return CctContext(context_key(tup), tup, draw(cct_counters))
    return CctContext(draw(b32), None, draw(cct_counters))


cct_overflows = st.builds(
    CctOverflow, st.sampled_from(OverflowReason), st.sampled_from(EdgeKind), cct_counters
)
cct_sections = st.builds(
    CctSection,
    bits3,
    st.lists(cct_contexts(), max_size=3).map(tuple),
    st.lists(cct_overflows, max_size=3).map(tuple),
)

# --- evidence ---------------------------------------------------------------------------------

context_refs = st.builds(NormalContext, b32) | st.builds(
    OverflowContext, st.sampled_from(OverflowReason), st.sampled_from(EdgeKind)
)
value_states = st.builds(ValueAvailable, b32, u16, u64) | st.builds(
    ValueLost, st.sampled_from(ValueLossReason)
)
error_ids = st.builds(ErrorCaptureId, thread_refs, u64)

span_starts = st.builds(
    SpanStart,
    call_refs,
    st.none() | call_refs,
    thread_refs,
    context_refs,
    u32,
    st.none() | call_sites,
    st.sampled_from(EdgeKind),
    u64,
    bits3,
    bits3,
    st.none() | st.builds(RuntimeAnnotation, u32, b16),
)
span_ends = st.builds(SpanEnd, call_refs, u64, st.sampled_from(FunctionEndStatus), u64)
span_runtime_ids = st.builds(SpanRuntimeId, call_refs, u32, b16)
value_occurrences = st.builds(
    ValueOccurrence, call_refs, context_refs, st.sampled_from(ValueRole), value_states
)
error_captures = st.builds(
    ErrorCapture,
    error_ids,
    call_refs,
    context_refs,
    u32,
    st.none() | throw_sites,
    st.sampled_from(ErrorKind),
    st.sampled_from(ErrorSource),
    value_states,
)
terminal_refs = st.builds(
    TerminalErrorRef, call_refs, error_ids | st.sampled_from(ErrorCaptureLossReason)
)
thread_starts = st.builds(
    ThreadStart,
    thread_refs,
    st.none() | thread_refs,
    st.none() | call_refs,
    st.none() | call_sites,
    u64,
    st.sampled_from(ThreadKind),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=64),
)
thread_ends = st.builds(ThreadEnd, thread_refs, u64, st.sampled_from(ThreadEndStatus))

FACT_STRATEGIES = {
    "SpanStart": span_starts,
    "SpanEnd": span_ends,
    "SpanRuntimeId": span_runtime_ids,
    "ValueOccurrence": value_occurrences,
    "ErrorCapture": error_captures,
    "TerminalErrorRef": terminal_refs,
    "ThreadStart": thread_starts,
    "ThreadEnd": thread_ends,
}
facts = st.one_of(*FACT_STRATEGIES.values())


def _unique_threads(items: list[Fact]) -> tuple[Fact, ...]:
    """Drop a second ThreadStart/ThreadEnd for one thread (a payload may hold only one)."""
    starts: set[ThreadRef] = set()
    ends: set[ThreadRef] = set()
    kept: list[Fact] = []
    for fact in items:
        seen = starts if isinstance(fact, ThreadStart) else ends
        if isinstance(fact, ThreadStart | ThreadEnd):
            if fact.thread in seen:
                continue
            seen.add(fact.thread)
        kept.append(fact)
    return tuple(kept)


fact_lists = st.lists(facts, max_size=6).map(_unique_threads)

# --- segments ---------------------------------------------------------------------------------

data_groups = st.builds(DataGroup, thread_refs, cct_sections, fact_lists).filter(
    lambda g: bool(g.evidence) or not g.cct.is_empty() or g.cct.health != 0
)


@st.composite
def data_segments(draw: st.DrawFn) -> DataSegment:
    groups = draw(st.lists(data_groups, max_size=4, unique_by=lambda g: g.root.to_bytes()))
    groups.sort(key=lambda g: g.root.to_bytes())
    return DataSegment(draw(u64), draw(euids), tuple(groups))


health_blocks = st.builds(ExecutionHealth, *([u64] * len(HEALTH_FIELDS)))
stream_starts = st.builds(StreamStarted, u32, u64, text, text)
engine_starts = st.builds(
    EngineStarted, u64, b16, st.none() | b32, st.none() | text, st.none() | text
)
root_starts = st.builds(RootStarted, thread_refs, u64, b16)
root_endeds = st.builds(
    RootEnded,
    thread_refs,
    u64,
    st.sampled_from(RootStatus),
    st.integers(0, 1),
    u64,
    u64,
    u64,
    health_blocks,
)
META_STRATEGIES = {
    "StreamStarted": stream_starts,
    "EngineStarted": engine_starts,
    "RootStarted": root_starts,
    "RootEnded": root_endeds,
}


@st.composite
def meta_segments(draw: st.DrawFn) -> MetaSegment:
    records = draw(st.lists(engine_starts | root_starts | root_endeds, max_size=5))
    if draw(st.booleans()):
        return MetaSegment(1, draw(euids), draw(u64), (draw(stream_starts), *records))
    return MetaSegment(draw(u64), draw(euids), draw(u64), tuple(records))


# --- function tables --------------------------------------------------------------------------

function_entries = st.builds(
    FunctionEntry,
    u32,
    text,
    text,
    st.none() | text,
    st.none() | st.sampled_from(FunctionKind),
    st.none() | text,
    st.none() | st.sampled_from(FunctionOrigin),
    st.none() | text,
    st.none() | st.builds(FunctionSpan, u32, u32, u32),
    st.none() | text,
    st.lists(text, max_size=3).map(tuple),
)


@st.composite
def function_tables(draw: st.DrawFn) -> FunctionTable:
    functions = draw(st.lists(function_entries, max_size=4, unique_by=lambda f: f.function_id))
    files = draw(
        st.lists(st.builds(SourceFile, u32, text), max_size=3, unique_by=lambda f: f.file_id)
    )
    return FunctionTable(
        tuple(sorted(functions, key=lambda f: f.function_id)),
        tuple(sorted(files, key=lambda f: f.file_id)),
    )
