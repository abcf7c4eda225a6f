"""Hand-made fold inputs: small builders and a Hypothesis strategy for whole executions."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

from baml_studio.catalog.fold_inputs import (
    CorruptDataSegment,
    DataIssue,
    DataRead,
    ExecutionInputs,
    ExecutionMeta,
    MissingDataSegment,
    ProcessInfo,
)
from baml_studio.format.cct import context_key
from baml_studio.format.function_table import FunctionEntry, FunctionTable, SourceFile
from baml_studio.format.ids import CallRef, ThreadRef
from baml_studio.format.records import (
    ROLE_ERROR,
    ROLE_INPUT,
    ROLE_OUTPUT,
    SELECT_ROOT,
    CallSiteSpan,
    CctContext,
    CctCounters,
    CctOverflow,
    CctSection,
    CctTuple,
    DataGroup,
    EdgeKind,
    EngineStarted,
    ExecutionHealth,
    Fact,
    FunctionEndStatus,
    NormalContext,
    OverflowReason,
    RootEnded,
    RootStarted,
    RootStatus,
    SpanEnd,
    SpanStart,
    StreamStarted,
    ThreadEnd,
    ThreadEndStatus,
    ThreadKind,
    ThreadStart,
    ValueAvailable,
    ValueLossReason,
    ValueLost,
    ValueOccurrence,
    ValueRole,
    ValueState,
)

EUID = bytes(range(16))
PROGRAM = b"\x11" * 16
ROOT = ThreadRef(EUID, 1, 1)
ALL_ROLES = ROLE_INPUT | ROLE_OUTPUT | ROLE_ERROR
TABLE = FunctionTable(
    (
        FunctionEntry(1, "app.Root", "Root"),
        FunctionEntry(2, "app.Child", "Child", "function:app.Child"),
        FunctionEntry(3, "app.Leaf", "Leaf"),
    ),
    (SourceFile(7, "app.baml"),),
)


def tup(function_id: int, parent: bytes | None = None, edge: EdgeKind = EdgeKind.CALL) -> CctTuple:
    site = CallSiteSpan(7, 10 * function_id, 10 * function_id + 5, function_id)
    return CctTuple(PROGRAM, parent, function_id, site, edge)


def ctx(t: CctTuple, **counters: int) -> CctContext:
    return CctContext(context_key(t), t, CctCounters(**counters))


def process(
    *, alive: bool = False, gaps: Sequence[int] = (), started: bool = True, hw: int = 10
) -> ProcessInfo:
    stream = StreamStarted(42, 1_700_000_000_000_000_000, "0.17.0", "linux-x86_64")
    return ProcessInfo(EUID, alive, stream if started else None, hw, hw, tuple(gaps))


def meta(
    *,
    started_seq: int | None = 1,
    ended_seq: int | None = 2,
    status: RootStatus = RootStatus.SUCCEEDED,
    flags: int = 0,
    data: tuple[int, int, int] = (1, 1, 1),
    root: ThreadRef = ROOT,
) -> ExecutionMeta:
    started = RootStarted(root, 100, b"\x0b" * 16) if started_seq is not None else None
    ended = (
        RootEnded(root, 900, status, flags, *data, ExecutionHealth(error_captures_queued=3))
        if ended_seq is not None
        else None
    )
    return ExecutionMeta(
        root, started, started_seq or 0, 0, ended, ended_seq or 0, EngineStarted(1, PROGRAM)
    )


def inputs(
    facts: Sequence[Fact] = (),
    contexts: Sequence[CctContext] = (),
    *,
    overflows: Sequence[CctOverflow] = (),
    health: int = 0,
    the_meta: ExecutionMeta | None = None,
    the_process: ProcessInfo | None = None,
    table: FunctionTable | None = TABLE,
    issues: Sequence[DataIssue] = (),
) -> ExecutionInputs:
    group = DataGroup(ROOT, CctSection(health, tuple(contexts), tuple(overflows)), tuple(facts))
    return ExecutionInputs(
        the_process or process(),
        the_meta or meta(),
        table,
        DataRead(((1, group),), tuple(issues), 1),
    )


# --- Hypothesis: whole executions ------------------------------------------------------------

u64 = st.integers(0, (1 << 64) - 1)
small = st.integers(0, 1000)
counters = st.builds(
    CctCounters, small, small, small, small, small, small,
    st.integers(0, (1 << 70)), st.integers(0, 1 << 70), st.integers(0, 1 << 70), small,
)  # fmt: skip
values: st.SearchStrategy[ValueState] = st.one_of(
    st.builds(ValueAvailable, st.binary(min_size=32, max_size=32), st.just(1), small),
    st.builds(ValueLost, st.sampled_from(ValueLossReason)),
)


@st.composite
def executions(draw: st.DrawFn) -> ExecutionInputs:
    """A random but well-typed execution: a context tree, spans over it, values, threads,
    and random meta-plane and data-issue circumstances."""
    contexts: list[CctContext] = []
    for _ in range(draw(st.integers(1, 6))):
        parent = draw(st.sampled_from([None, *[c.key for c in contexts]]))
        edge = EdgeKind.ROOT if parent is None else draw(st.sampled_from(EdgeKind))
        contexts.append(CctContext(context_key(t := tup(draw(st.integers(1, 5)), parent, edge)),
                                   t, draw(counters)))  # fmt: skip
    facts: list[Fact] = []
    threads = [ROOT, ThreadRef(EUID, 1, 2)]
    for thread in threads[: draw(st.integers(0, 2))]:
        kind = ThreadKind.ROOT if thread == ROOT else ThreadKind.SPAWN
        parent = None if thread == ROOT else ROOT
        facts.append(ThreadStart(thread, parent, None, None, draw(small), kind, draw(st.text())))
        if draw(st.booleans()):
            facts.append(ThreadEnd(thread, draw(small), draw(st.sampled_from(ThreadEndStatus))))
    for call_id in range(1, draw(st.integers(0, 5)) + 1):
        call = CallRef(draw(st.sampled_from(threads)), call_id)
        context = NormalContext(draw(st.sampled_from(contexts)).key)
        roles = draw(st.integers(0, 7))
        edge = EdgeKind.ROOT if call_id == 1 else EdgeKind.CALL
        facts.append(SpanStart(call, None, call.thread, context, draw(st.integers(0, 6)), None,
                               edge, draw(small), SELECT_ROOT, roles))  # fmt: skip
        if draw(st.booleans()):
            facts.append(ValueOccurrence(call, context, draw(st.sampled_from(ValueRole)),
                                         draw(values)))  # fmt: skip
        if draw(st.booleans()):
            status = draw(st.sampled_from(FunctionEndStatus))
            facts.append(SpanEnd(call, draw(small), status, draw(small)))
    overflows = draw(st.lists(st.builds(CctOverflow, st.sampled_from(OverflowReason),
                                        st.sampled_from(EdgeKind), counters),
                              max_size=2, unique_by=lambda o: (o.reason, o.edge_kind)))  # fmt: skip
    ended = draw(st.booleans())
    issues = draw(st.lists(st.sampled_from([MissingDataSegment(2), CorruptDataSegment(3)]),
                           max_size=2, unique=True))  # fmt: skip
    return inputs(
        facts,
        contexts,
        overflows=overflows,
        health=draw(st.integers(0, 7)),
        the_meta=meta(
            started_seq=draw(st.sampled_from([None, 1, 3])),
            ended_seq=4 if ended else None,
            flags=draw(st.integers(0, 1)),
        ),
        the_process=process(
            alive=draw(st.booleans()), gaps=draw(st.lists(st.integers(1, 6), max_size=2))
        ),
        table=draw(st.sampled_from([TABLE, None])),
        issues=issues,
    )
