"""A realistic, seeded, deterministic synthetic BAML workload that drives the real profiler.

``program`` is the BAML-like program (LLM functions, helpers, root orchestrators), ``data`` the
seeded inputs and the outcome each execution must have, ``runner`` the driver::

    from baml_studio.workload import run_workload
    report = run_workload(Path(".baml/profiles-v1"), executions=1000, processes=2, seed=7)
    report.executions_by_status      # {"cancelled": 20, "failed": 60, "succeeded": 920}
    report.executions[0].arguments   # {"invoice_id": "INV-1000", "customer_age": 41, ...}
    report.to_json_text()            # per execution: ordinal, process, root, status, arguments ...

Importing this package registers the program's functions (``app.*``) in the process-global
profiler registry, as importing any BAML program does.
"""

from baml_studio.workload.data import DECK_SIZE, LARGE_VALUE_BYTES, Variant
from baml_studio.workload.runner import (
    ExecutionRecord,
    InvalidWorkload,
    ProcessResult,
    WorkloadError,
    WorkloadMismatch,
    WorkloadProcessFailed,
    WorkloadReport,
    WorkloadRun,
    execute_workload,
    plan_workload,
    run_workload,
    share,
)

__all__ = [
    "DECK_SIZE",
    "LARGE_VALUE_BYTES",
    "ExecutionRecord",
    "InvalidWorkload",
    "ProcessResult",
    "Variant",
    "WorkloadError",
    "WorkloadMismatch",
    "WorkloadProcessFailed",
    "WorkloadReport",
    "WorkloadRun",
    "execute_workload",
    "plan_workload",
    "run_workload",
    "share",
]
