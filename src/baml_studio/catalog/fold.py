"""The fold: one execution's inputs to its catalog v1 rows. Pure: no I/O, no clock.

:func:`fold_execution` gives ``threads_v1``, ``call_path_stats_v1``, ``calls_v1``,
``errors_v1`` and ``health_v1`` for one execution, each with exactly its relation's schema and
rows in key order, so the same inputs always give byte-identical tables. The row rules are in
the ``fold_*`` modules: :mod:`.fold_meta` (status, index state, the meta-only root columns),
:mod:`.fold_gather` (facts and the dependency rule), :mod:`.fold_cct`, :mod:`.fold_calls`,
:mod:`.fold_threads` and :mod:`.fold_health`.

A data state is complete iff RootEnded is present, every data sequence in its range exists
and decodes, the files holding the execution number ``data_segment_count``, and every
dependency resolves; each failure is one ``DataIssue``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from baml_studio.catalog.fold_arrow import to_table
from baml_studio.catalog.fold_calls import call_rows, error_rows
from baml_studio.catalog.fold_cct import call_path_rows
from baml_studio.catalog.fold_gather import gather
from baml_studio.catalog.fold_health import health_rows
from baml_studio.catalog.fold_inputs import (
    CorruptDataSegment,
    DataIssue,
    ExecutionInputs,
    NoRootEnded,
    UnresolvedDependency,
)
from baml_studio.catalog.fold_threads import thread_rows
from baml_studio.catalog.schema import BY_NAME, CALL_PATH_STATS, CALLS, ERRORS, HEALTH, THREADS

EXECUTION_RELATIONS: tuple[str, ...] = (
    THREADS.name,
    CALL_PATH_STATS.name,
    CALLS.name,
    ERRORS.name,
    HEALTH.name,
)
"""The relations :func:`fold_execution` produces (keyed by execution)."""


def data_issues(inputs: ExecutionInputs, corrupt: list[int], unresolved: bool) -> list[DataIssue]:
    """The loader's read issues, then ``NoRootEnded``, CCT-merge corruption, and
    ``UnresolvedDependency``."""
    issues: list[DataIssue] = list(inputs.data.issues)
    if inputs.meta.ended is None:
        issues.append(NoRootEnded())
    issues.extend(CorruptDataSegment(seq) for seq in corrupt)
    if unresolved:
        issues.append(UnresolvedDependency())
    return issues


def fold_rows(inputs: ExecutionInputs) -> dict[str, list[dict[str, Any]]]:
    """The rows of :func:`fold_execution` as dicts (a column a row leaves out is NULL), for
    callers that build one table out of many executions."""
    g = gather(inputs.data.groups)
    execution_id = inputs.meta.execution_id
    table = inputs.function_table
    paths, derived_health = call_path_rows(execution_id, g.cct, table)
    issues = data_issues(inputs, g.corrupt_sequences, g.unresolved)
    return {
        THREADS.name: thread_rows(inputs, g),
        CALL_PATH_STATS.name: paths,
        CALLS.name: call_rows(execution_id, g, table, inputs.process),
        ERRORS.name: error_rows(execution_id, g, table),
        HEALTH.name: health_rows(inputs, g.cct, g.cct.health | derived_health, issues),
    }


def fold_execution(inputs: ExecutionInputs) -> dict[str, pa.Table]:
    """Fold one execution into its five per-execution tables (keyed by relation name)."""
    return {name: to_table(BY_NAME[name], rows) for name, rows in fold_rows(inputs).items()}
