"""A projector worker in its own process, killed with SIGKILL mid-execution (test_faults.py).

Usage: ``python projector_kill_worker.py DATA_DIR CONTROL_URL DERIVED_DIR`` with
``BAML_WORKLOAD_TOKEN`` and ``PROJECTOR_KILL_AT=n`` in the environment. The worker drains the
data plane's queue (SQLite, directory bucket) into the control plane at CONTROL_URL and Lance
under DERIVED_DIR, and SIGKILLs itself at the n-th ``PrivateStore.write_executions`` (one per
meta object): after those executions' public batches are visible, before any of their private
rows or markers.

Prints one JSON object a line, flushed: ``{"leased": [receipt, …]}`` for every receive (the
test makes them visible again, as their visibility timeout would), ``{"killing": execution_id}``
(the first execution of the write) and ``written_before`` (executions committed before it) just
before the kill. Exits 3 if the queue drains before the n-th execution.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from baml_studio.gateway.service import load_dataplane_config
from baml_studio.projector.lance_store import PrivateStore
from baml_studio.projector.service import ProjectorConfig, open_projector
from baml_studio.projector.worker import ProjectorWorker, WorkerConfig


def emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main() -> int:
    data, url, derived = sys.argv[1:4]
    kill_at = int(os.environ["PROJECTOR_KILL_AT"])
    original = PrivateStore.write_executions
    writes = 0
    written = 0

    def write_executions(self: PrivateStore, executions: Any, **kwargs: Any) -> None:
        nonlocal writes, written
        writes += 1
        if writes == kill_at:
            emit({"killing": executions[0][0], "written_before": written})
            os.kill(os.getpid(), signal.SIGKILL)
        original(self, executions, **kwargs)
        written += len(executions)

    PrivateStore.write_executions = write_executions  # type: ignore[method-assign]
    dataplane = load_dataplane_config(Path(data), host="127.0.0.1", port=8787)
    projector = open_projector(ProjectorConfig(dataplane, url, os.environ["BAML_WORKLOAD_TOKEN"]))
    private = PrivateStore(derived)
    worker = ProjectorWorker(
        store=projector.store,
        queue=projector.queue,
        control=projector.control,
        private_store=lambda scope: private,
        config=WorkerConfig(retry_backoff_s=(0,)),
    )
    while messages := projector.queue.receive(max_messages=10):
        emit({"leased": [m.receipt for m in messages]})
        for message in messages:
            worker.handle(message)
    emit({"drained": worker.stats.executions})
    return 3


if __name__ == "__main__":
    sys.exit(main())
