"""``health_v1`` rows of one execution, plane by plane (reference facts §5.2).

* ``execution``: the 26 RootEnded counters (only when RootEnded was read);
* ``cct``: ``counter_saturated``, ``await_counter_saturated``, ``self_time_underflow`` (0/1);
* ``overflow``: ``calls_started`` per overflow row, with its edge kind and reason;
* ``process``: ``data_file_count``, the data files of the process read for this execution
  that hold one of its groups (compare ``threads_v1.data_file_count``, RootEnded's count);
* ``data``: ``data_state`` (1 and ``complete``, or 0 and ``incomplete``), then one
  ``data_issue`` row (value 1) per issue, the reason being its Rust ``Debug`` rendering.
"""

from __future__ import annotations

from typing import Any

from baml_studio.catalog.fold_inputs import DataIssue, ExecutionInputs
from baml_studio.catalog.fold_names import HEALTH_METRICS, OVERFLOW_REASON_SQL, edge_sql
from baml_studio.format.records import (
    CCT_AWAIT_COUNTER_SATURATED,
    CCT_COUNTER_SATURATED,
    CCT_SELF_TIME_UNDERFLOW,
    CctSection,
)

CCT_BITS = (
    ("counter_saturated", CCT_COUNTER_SATURATED),
    ("await_counter_saturated", CCT_AWAIT_COUNTER_SATURATED),
    ("self_time_underflow", CCT_SELF_TIME_UNDERFLOW),
)


def health_rows(
    inputs: ExecutionInputs, cct: CctSection, cct_health: int, issues: list[DataIssue]
) -> list[dict[str, Any]]:
    execution_id = inputs.meta.execution_id
    rows: list[dict[str, Any]] = []

    def add(metric: str, plane: str, value: int, edge: str | None = None, reason: str | None = None
            ) -> None:  # fmt: skip
        rows.append(
            {"execution_id": execution_id, "metric": metric, "plane": plane, "value": value,
             "edge_kind": edge, "reason": reason}
        )  # fmt: skip

    ended = inputs.meta.ended
    if ended is not None:
        for metric, value in zip(HEALTH_METRICS, ended.health.values(), strict=True):
            add(metric, "execution", value)
    for metric, bit in CCT_BITS:
        add(metric, "cct", 1 if cct_health & bit else 0)
    for ovf in cct.overflows:
        add(
            "calls_started",
            "overflow",
            ovf.counters.invocations_started,
            edge_sql(ovf.edge_kind),
            OVERFLOW_REASON_SQL[ovf.reason],
        )
    add("data_file_count", "process", inputs.data.files_found)
    complete = not issues
    add("data_state", "data", 1 if complete else 0, reason="complete" if complete else "incomplete")
    for issue in issues:
        add("data_issue", "data", 1, reason=issue.debug())
    return rows
