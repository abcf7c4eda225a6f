"""Catalog v1: every relation, column, Arrow type, nullability, key, and public/private class.

This one table is the source of truth for the fold's output schemas, the query engine's
catalog, ``baml-studio query --schema``, the projector's public batches and the projection
schemas the control plane registers (reference facts §5.1–§5.2, DESIGN.md §5).

*Public* columns may leave the data plane (identifiers, function names and ids, definition
keys, kinds, statuses, availability states, counts, timings, CIDs and object keys). *Private*
columns never do: value bodies (``args``, ``output``, ``error``, ``errors.value``), source
locations (``call_site_*``, ``spawn_site_*``, ``throw_site_*``, ``source_file``,
``source_start``, ``source_end``) and thread names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pyarrow as pa

CATALOG_VERSION = "v1"

UTF8 = pa.string()
U32 = pa.uint32()
U64 = pa.uint64()
BOOL = pa.bool_()
BINARY = pa.binary()
TIMESTAMP = pa.timestamp("ns", tz="UTC")
STR_LIST = pa.list_(pa.field("item", pa.string(), nullable=False))


class Visibility(enum.Enum):
    PUBLIC = "public"
    PRIVATE = "private"


PUBLIC = Visibility.PUBLIC
PRIVATE = Visibility.PRIVATE


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: pa.DataType
    nullable: bool
    visibility: Visibility
    doc: str
    key: bool = False
    role: str | None = None
    """For virtual value columns: ``input``, ``output`` or ``error``."""

    @property
    def virtual(self) -> bool:
        return self.role is not None

    def field(self) -> pa.Field:
        metadata = {"baml.virtual": "value", "baml.role": self.role} if self.role else None
        return pa.field(self.name, self.type, nullable=self.nullable, metadata=metadata)


@dataclass(frozen=True, slots=True)
class Relation:
    name: str
    aliases: tuple[str, ...]
    grain: str
    doc: str
    columns: tuple[Column, ...]
    internal: bool = False

    @property
    def alias(self) -> str:
        return self.aliases[0]

    def schema(self) -> pa.Schema:
        return pa.schema([c.field() for c in self.columns])

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"{self.name} has no column {name!r}")

    def public_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.visibility is PUBLIC)

    def private_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.visibility is PRIVATE)


def c(
    name: str,
    type_: pa.DataType,
    nullable: bool,
    visibility: Visibility,
    doc: str,
    *,
    key: bool = False,
    role: str | None = None,
) -> Column:
    return Column(name, type_, nullable, visibility, doc, key, role)


def _site(prefix: str, what: str) -> tuple[Column, ...]:
    return (
        c(f"{prefix}_file", UTF8, True, PRIVATE, f"source file of the {what}"),
        c(f"{prefix}_line", U32, True, PRIVATE, f"1-based line of the {what}"),
    )


def _site_span(prefix: str, what: str) -> tuple[Column, ...]:
    return (
        *_site(prefix, what),
        c(f"{prefix}_start", U32, True, PRIVATE, f"byte offset where the {what} starts"),
        c(f"{prefix}_end", U32, True, PRIVATE, f"byte offset where the {what} ends"),
    )


EXECUTION_ID = c(
    "execution_id", UTF8, False, PUBLIC, "root thread wire id (baml_thread_1_…)", key=True
)

THREADS = Relation(
    "threads_v1",
    ("threads",),
    "(execution_id, thread_id)",
    "One row per logical thread; root rows (parent_thread_id IS NULL) are executions.",
    (
        EXECUTION_ID,
        c(
            "thread_id",
            UTF8,
            False,
            PUBLIC,
            "thread wire id; equals execution_id on the root",
            key=True,
        ),
        c("parent_thread_id", UTF8, True, PUBLIC, "NULL for the root thread"),
        c("spawn_call_id", UTF8, True, PUBLIC, "call that spawned the thread"),
        c("spawn_function_id", U32, True, PUBLIC, "function of the spawning call"),
        c("spawn_fqn", UTF8, True, PUBLIC, "fully qualified name of the spawning function"),
        *_site("spawn_site", "spawn site"),
        c("name", UTF8, True, PRIVATE, "thread name (empty becomes NULL)"),
        c("kind", UTF8, False, PUBLIC, "root | spawn"),
        c("started_ns", U64, False, PUBLIC, "start, ns since the process zero"),
        c("ended_ns", U64, True, PUBLIC, "end, ns since the process zero"),
        c("started_at", TIMESTAMP, True, PUBLIC, "wall-clock start"),
        c("ended_at", TIMESTAMP, True, PUBLIC, "wall-clock end"),
        c("end_status", UTF8, True, PUBLIC, "completed | cancelled | errored"),
        c("process_id", UTF8, True, PUBLIC, "process euid (32 hex)"),
        c("engine_id", U64, True, PUBLIC, "engine within the process"),
        c("program_id", UTF8, True, PUBLIC, "program id (32 hex)"),
        c("revision_id", UTF8, True, PUBLIC, "EngineStarted revision label"),
        c("source_label", UTF8, True, PUBLIC, "EngineStarted source label"),
        c("runtime_id", UTF8, True, PUBLIC, "host runtime token (baml_id_1_…)"),
        c("entry_function_id", U32, True, PUBLIC, "function of the root span"),
        c("entry_fqn", UTF8, True, PUBLIC, "fully qualified name of the root function"),
        c(
            "status",
            UTF8,
            True,
            PUBLIC,
            "running | abandoned | succeeded | failed | cancelled | panicked",
        ),
        c(
            "index_state",
            UTF8,
            True,
            PUBLIC,
            "complete | no_root_ended | root_started_lost | index_corrupt",
        ),
        c("duration_ns", U64, True, PUBLIC, "root span inclusive ns, else ended - started"),
        c("total_calls", U64, True, PUBLIC, "calls started, all call paths and overflow"),
        c("total_errors", U64, True, PUBLIC, "calls completed with an error"),
        c("total_cancelled", U64, True, PUBLIC, "calls cancelled"),
        c("calls_retained", U64, True, PUBLIC, "calls with a SpanStart (rows in calls_v1)"),
        c("threads_total", U64, True, PUBLIC, "threads in the execution"),
        c("value_state", UTF8, True, PUBLIC, "none | partial | complete (inputs and outputs)"),
        c("data_first_seq", U64, True, PUBLIC, "first data segment (RootEnded; 0 if absent)"),
        c("data_last_seq", U64, True, PUBLIC, "last data segment (RootEnded; 0 if absent)"),
        c("data_file_count", U64, True, PUBLIC, "data segments holding the execution"),
    ),
)

CALL_PATH_STATS = Relation(
    "call_path_stats_v1",
    ("call_path_stats", "cct_population"),
    "(execution_id, call_path_id)",
    "One row per calling context (call path) of an execution, plus overflow rows.",
    (
        EXECUTION_ID,
        c(
            "call_path_id",
            UTF8,
            False,
            PUBLIC,
            "context key (64 hex) or overflow:<reason>:<edge>",
            key=True,
        ),
        c("parent_call_path_id", UTF8, True, PUBLIC, "NULL for the root and overflow rows"),
        c("depth", U32, False, PUBLIC, "0 = root"),
        c("function_id", U32, False, PUBLIC, "0 if the context tuple is missing"),
        c("fqn", UTF8, True, PUBLIC, "fully qualified function name"),
        c("definition_key", UTF8, True, PUBLIC, "definition key"),
        c("kind", UTF8, True, PUBLIC, "bytecode | sysop | native | native_unresolved"),
        c("origin", UTF8, True, PUBLIC, "user | companion | internal | builtin | auto_derive"),
        *_site_span("call_site", "call site"),
        c("edge_kind", UTF8, False, PUBLIC, "root | call | spawn"),
        c("calls_started", U64, False, PUBLIC, "invocations started"),
        c("calls_selected", U64, False, PUBLIC, "invocations with a retained span"),
        c("completed_ok", U64, False, PUBLIC, "completed ok"),
        c("completed_error", U64, False, PUBLIC, "completed with an error"),
        c("completed_cancelled", U64, False, PUBLIC, "cancelled"),
        c("completed_exit", U64, False, PUBLIC, "exited"),
        c("inclusive_ns", U64, False, PUBLIC, "inclusive time"),
        c("direct_child_ns", U64, False, PUBLIC, "inclusive time of direct (call) children"),
        c("await_ns", U64, False, PUBLIC, "time suspended in awaits"),
        c("self_ns", U64, False, PUBLIC, "inclusive - direct children - await, clamped at 0"),
        c("await_count", U64, False, PUBLIC, "awaits"),
        c("timing_complete", BOOL, False, PUBLIC, "no saturation or self-time underflow"),
        c("overflow_reason", UTF8, True, PUBLIC, "NULL for real contexts"),
    ),
)

CALLS = Relation(
    "calls_v1",
    ("calls", "retained_calls"),
    "(execution_id, call_id)",
    "One row per retained call (root, LLM or manually captured), with its values.",
    (
        EXECUTION_ID,
        c("call_id", UTF8, False, PUBLIC, "call wire id (baml_call_1_…)", key=True),
        c("parent_call_id", UTF8, True, PUBLIC, "caller"),
        c("thread_id", UTF8, False, PUBLIC, "thread of the call"),
        c("call_path_id", UTF8, True, PUBLIC, "calling context"),
        c("call_path_overflow_reason", UTF8, True, PUBLIC, "set when the context overflowed"),
        c("function_id", U32, False, PUBLIC, "function id"),
        c("fqn", UTF8, True, PUBLIC, "fully qualified function name"),
        c("definition_key", UTF8, True, PUBLIC, "definition key"),
        c("kind", UTF8, True, PUBLIC, "function kind"),
        c("edge_kind", UTF8, False, PUBLIC, "root | call | spawn"),
        *_site_span("call_site", "call site"),
        c("started_ns", U64, False, PUBLIC, "start, ns since the process zero"),
        c("ended_ns", U64, True, PUBLIC, "end, ns since the process zero"),
        c("duration_ns", U64, True, PUBLIC, "inclusive duration"),
        c("started_at", TIMESTAMP, True, PUBLIC, "wall-clock start"),
        c("ended_at", TIMESTAMP, True, PUBLIC, "wall-clock end"),
        c("status", UTF8, True, PUBLIC, "ok | errored | cancelled | exited"),
        c("selection_reasons", STR_LIST, False, PUBLIC, "root | llm | manual"),
        c("roles", STR_LIST, False, PUBLIC, "input | output | error"),
        c("runtime_ids", STR_LIST, False, PUBLIC, "host runtime tokens by annotation ordinal"),
        c(
            "args_state",
            UTF8,
            False,
            PUBLIC,
            "available | lost:<reason> | not_captured | not_applicable",
        ),
        c(
            "output_state",
            UTF8,
            False,
            PUBLIC,
            "available | lost:<reason> | not_captured | not_applicable",
        ),
        c(
            "error_state",
            UTF8,
            False,
            PUBLIC,
            "available | lost:<reason> | not_captured | not_applicable",
        ),
        c("args_cid", UTF8, True, PUBLIC, "bamlv_1_<sha256 hex> of the arguments"),
        c("output_cid", UTF8, True, PUBLIC, "bamlv_1_<sha256 hex> of the output"),
        c("error_cid", UTF8, True, PUBLIC, "bamlv_1_<sha256 hex> of the error"),
        c(
            "args",
            BINARY,
            True,
            PRIVATE,
            "the arguments, by declared parameter name (virtual)",
            role="input",
        ),
        c("output", BINARY, True, PRIVATE, "the return value (virtual)", role="output"),
        c("error", BINARY, True, PRIVATE, "the terminal error value (virtual)", role="error"),
        c("error_id", UTF8, True, PUBLIC, "terminal error (errors_v1.error_id)"),
        c("error_lost_reason", UTF8, True, PUBLIC, "why the terminal error capture was lost"),
    ),
)

ERRORS = Relation(
    "errors_v1",
    ("errors",),
    "(execution_id, error_id)",
    "One row per captured error, with its throw site, stack and the calls it ended.",
    (
        EXECUTION_ID,
        c("error_id", UTF8, False, PUBLIC, "<thread wire id>#<unwind ordinal>", key=True),
        c("throw_call_id", UTF8, False, PUBLIC, "call that threw"),
        c("throw_thread_id", UTF8, False, PUBLIC, "thread that threw"),
        c("throw_call_path_id", UTF8, True, PUBLIC, "calling context of the throw"),
        c("throw_function_id", U32, False, PUBLIC, "function that threw"),
        c("throw_fqn", UTF8, True, PUBLIC, "fully qualified name of the thrower"),
        *_site_span("throw_site", "throw site"),
        c("kind", UTF8, False, PUBLIC, "fresh | rethrow"),
        c("source", UTF8, False, PUBLIC, "bytecode | native_call | engine_call | future_resume"),
        c("value_state", UTF8, False, PUBLIC, "available | lost:<reason> | not_captured"),
        c("value_cid", UTF8, True, PUBLIC, "bamlv_1_<sha256 hex> of the error value"),
        c("value", BINARY, True, PRIVATE, "the error value (virtual)", role="error"),
        c("stack_complete", BOOL, False, PUBLIC, "the stack resolved to the root"),
        c("stack", STR_LIST, False, PUBLIC, "function names, root first, thrower last"),
        c("terminal_call_ids", STR_LIST, False, PUBLIC, "calls this error ended"),
    ),
)

FUNCTION_DEFINITIONS = Relation(
    "function_definitions_v1",
    ("function_definitions",),
    "(program_id, function_id)",
    "One row per function of every program (engine function table) in the store.",
    (
        c("program_id", UTF8, False, PUBLIC, "program id (32 hex)", key=True),
        c("function_id", U32, False, PUBLIC, "function id within the program", key=True),
        c("fqn", UTF8, False, PUBLIC, "fully qualified name"),
        c("display_name", UTF8, False, PUBLIC, "short name"),
        c("definition_key", UTF8, True, PUBLIC, "definition key"),
        c("kind", UTF8, False, PUBLIC, "bytecode | sysop | native | native_unresolved"),
        c("kind_detail", UTF8, True, PUBLIC, "sysop name, or other detail"),
        c("origin", UTF8, False, PUBLIC, "user | companion | internal | builtin | auto_derive"),
        c("source_file", UTF8, True, PRIVATE, "source file"),
        c("source_start", U32, True, PRIVATE, "byte offset where the definition starts"),
        c("source_end", U32, True, PRIVATE, "byte offset where the definition ends"),
        c("package", UTF8, True, PUBLIC, "package name"),
        c("namespace", UTF8, False, PUBLIC, "namespace segments joined with '.'"),
        c("revision_id", UTF8, True, PUBLIC, "revision label"),
        c("source_label", UTF8, True, PUBLIC, "source label"),
    ),
)

HEALTH = Relation(
    "health_v1",
    ("health",),
    "(execution_id, metric)",
    "Health counters and data-state rows per execution and plane.",
    (
        EXECUTION_ID,
        c("metric", UTF8, False, PUBLIC, "counter name", key=True),
        c("plane", UTF8, False, PUBLIC, "execution | cct | overflow | process | data"),
        c("value", U64, False, PUBLIC, "counter value"),
        c("edge_kind", UTF8, True, PUBLIC, "overflow rows: edge kind"),
        c("reason", UTF8, True, PUBLIC, "overflow and data rows: reason"),
    ),
)

PROCESSES = Relation(
    "processes_v1",
    ("processes",),
    "process_id",
    "One row per process stream in the store.",
    (
        c("process_id", UTF8, False, PUBLIC, "process euid (32 hex)", key=True),
        c("os_pid", U32, True, PUBLIC, "operating-system pid"),
        c("zero_unix_ns", U64, True, PUBLIC, "wall clock of the process's ns zero"),
        c("baml_version", UTF8, True, PUBLIC, "BAML version"),
        c("os_arch", UTF8, True, PUBLIC, "<os>-<arch>"),
        c("alive", BOOL, False, PUBLIC, "the owning process holds its stream lock"),
        c("meta_hw", U64, False, PUBLIC, "highest meta sequence"),
        c("data_hw", U64, False, PUBLIC, "highest data sequence"),
    ),
    internal=True,
)

STORE_FILES = Relation(
    "store_files_v1",
    ("store_files",),
    "(process_id, plane, sequence)",
    "One row per segment file.",
    (
        c("process_id", UTF8, False, PUBLIC, "process euid (32 hex)", key=True),
        c("plane", UTF8, False, PUBLIC, "meta | data", key=True),
        c("sequence", U64, False, PUBLIC, "segment sequence", key=True),
        c("path", UTF8, False, PUBLIC, "path relative to the store root"),
        c("record_or_group_count", U64, True, PUBLIC, "records (meta) or groups (data)"),
        c("payload_len", U64, False, PUBLIC, "file length in bytes"),
        c("checksum_ok", BOOL, False, PUBLIC, "trailing SHA-256 verified"),
        c("decode_ok", BOOL, False, PUBLIC, "the file decoded"),
    ),
    internal=True,
)

VALUE_INDEX = Relation(
    "value_index_v1",
    ("value_index",),
    "cid",
    "One row per CAS object in the store.",
    (
        c("cid", UTF8, False, PUBLIC, "bamlv_1_<sha256 hex>", key=True),
        c("codec", U32, False, PUBLIC, "1 = value body, 2 = function table"),
        c("body_len", U64, False, PUBLIC, "encoded body length"),
        c("path", UTF8, False, PUBLIC, "path relative to the store root"),
    ),
    internal=True,
)

RELATIONS: tuple[Relation, ...] = (
    THREADS,
    CALL_PATH_STATS,
    CALLS,
    ERRORS,
    FUNCTION_DEFINITIONS,
    HEALTH,
    PROCESSES,
    STORE_FILES,
    VALUE_INDEX,
)
PUBLIC_RELATIONS: tuple[Relation, ...] = tuple(r for r in RELATIONS if not r.internal)
BY_NAME: dict[str, Relation] = {r.name: r for r in RELATIONS}


@dataclass(frozen=True, slots=True)
class View:
    name: str
    alias: str
    sql: str
    doc: str


HOT_CALL_PATHS = View(
    "hot_call_paths_v1",
    "hot_call_paths",
    "SELECT execution_id, fqn, call_path_id, self_ns, inclusive_ns, calls_started "
    "FROM call_path_stats WHERE overflow_reason IS NULL AND timing_complete "
    "ORDER BY self_ns DESC",
    "Call paths by self time, slowest first.",
)
VIEWS: tuple[View, ...] = (HOT_CALL_PATHS,)


def resolve(name: str) -> Relation | None:
    """The relation a table name or alias refers to."""
    lowered = name.lower()
    for relation in RELATIONS:
        if lowered == relation.name or lowered in relation.aliases:
            return relation
    return None
