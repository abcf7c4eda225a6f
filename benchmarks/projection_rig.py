"""Services for ``benchmarks/projection.py``, each in its own process as deployed.

* :func:`dataplane` — ``baml-studio serve dataplane --data DIR`` (directory bucket + SQLite
  queue), with the scope provisioned and a publisher token minted from the local key ring, and
  ``dataplane.json`` setting the publishers' ``flush_interval_seconds``;
* :func:`control_plane` — the metastore provisioned (tenant, project, environment, a BYOC
  deployment serving it) and a workload token issued, without chDB, then
  ``baml-studio serve control --data DIR`` (SQLite metastore + chDB under DIR);
* :class:`Resident` — ``SELECT count(*) FROM calls_v1`` through ``POST /query-snapshots`` and
  ``POST /resident-queries``, as a client of the workload API;
* :class:`Phases` — wall time of the worker's steps, summed over threads, by wrapping the
  functions the worker module calls (``gather_root_ended``, ``project_executions``) and the
  control client and private store it holds.

Nothing here imports from ``tests/``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

from baml_studio.gateway.config import Scope
from baml_studio.projector.control_client import new_request_id

SCOPE = Scope("tn_bench", "prj_bench", "env_bench")
DEPLOYMENT = "dep_bench"
CELL = "cell-1"
START_TIMEOUT_S = 120.0
CLI = [sys.executable, "-m", "baml_studio.cli"]
BUDGET = {
    "max_wall_ms": 30_000,
    "max_rows_read": 100_000_000,
    "max_bytes_read": 20_000_000_000,
    "max_result_rows": 10,
    "max_result_bytes": 1_000_000,
}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass(frozen=True)
class Service:
    url: str
    token: str
    pid: int


@contextlib.contextmanager
def _serve(command: list[str], url: str, health: str, log_path: Path) -> Iterator[int]:
    """Run ``command`` (stderr to ``log_path``) until ``url + health`` answers; yield its pid."""
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx.Client(timeout=1) as client:  # one client: each new one loads the CA store
            while True:
                if process.poll() is not None:
                    tail = log_path.read_text(errors="replace")[-3000:]
                    raise SystemExit(f"{command[3:5]} exited with {process.returncode}:\n{tail}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(url + health).status_code < 500:
                        break
                if time.monotonic() > deadline:
                    raise SystemExit(f"{command[3:5]} did not start in {START_TIMEOUT_S:.0f} s")
                time.sleep(0.05)  # readiness poll of a child process, bounded by the deadline
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def dataplane(data_dir: Path, *, flush_interval_s: int = 5) -> Iterator[Service]:
    """``serve dataplane`` on 127.0.0.1 with :data:`SCOPE` provisioned; (URL, publisher token)."""
    from baml_studio.gateway.environments import EnvironmentsFile
    from baml_studio.gateway.service import DataplaneConfig
    from baml_studio.gateway.tokens import KeyRingFile, mint_publisher_token

    data_dir.mkdir(parents=True, exist_ok=True)
    settings = {"limits": {"flush_interval_seconds": flush_interval_s}}
    (data_dir / "dataplane.json").write_text(json.dumps(settings))
    config = DataplaneConfig(data_dir=data_dir, public_base_url="http://127.0.0.1")
    token = mint_publisher_token(KeyRingFile(config.keys_path).load_or_create(), SCOPE, 7200)
    EnvironmentsFile(config.environments_path).add(SCOPE)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [*CLI, "serve", "dataplane", "--data", str(data_dir), "--port", str(port)]
    with _serve(command, url, "/v1/publisher/config", data_dir / "serve.log") as pid:
        yield Service(url, token, pid)


def provision_control(data_dir: Path) -> str:
    """Create :data:`SCOPE` and its deployment in the metastore; a workload token for it."""
    from baml_studio.control.config import ControlConfig
    from baml_studio.control.identity import ControlKeys, TokenIssuer
    from baml_studio.control.metastore import Metastore
    from baml_studio.control.model import DeploymentKind

    config = ControlConfig.from_data_dir(data_dir)
    with Metastore.open(config.metastore_url) as ms:
        ms.create_tenant(SCOPE.tenant)
        ms.create_project(SCOPE.tenant, SCOPE.project)
        ms.create_environment(SCOPE.tenant, SCOPE.project, SCOPE.environment)
        ms.create_deployment(DEPLOYMENT, DeploymentKind.BYOC, CELL, tenant_id=SCOPE.tenant)
        ms.assign_environment(DEPLOYMENT, SCOPE)
        issuer = TokenIssuer(ControlKeys(config.keys_path).ring, ms)
        return issuer.issue_workload(SCOPE.tenant, DEPLOYMENT, CELL, ttl_s=3600).token


@contextlib.contextmanager
def control_plane(data_dir: Path) -> Iterator[Service]:
    """``serve control`` (SQLite metastore + chDB under ``data_dir``) with :data:`SCOPE`."""
    data_dir.mkdir(parents=True, exist_ok=True)
    token = provision_control(data_dir)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [*CLI, "serve", "control", "--data", str(data_dir), "--port", str(port)]
    with _serve(command, url, "/healthz", data_dir / "serve.log") as pid:
        yield Service(url, token, pid)


class Resident:
    """Resident queries of :data:`SCOPE` through the workload API: every call is counted in
    ``call_path_stats_v1.calls_started``; captured calls (LLM functions, roots, ``capture()``)
    also have a ``calls_v1`` row."""

    CALLS = "SELECT sum(calls_started) AS n FROM call_path_stats_v1"
    CAPTURED = "SELECT count(*) AS n FROM calls_v1"

    def __init__(self, url: str, token: str) -> None:
        self._http = httpx.Client(base_url=url, timeout=60)
        self._token = token

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}", "X-Baml-Request-Id": new_request_id()}

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        answer = self._http.post(path, json=body, headers=self._headers())
        if answer.status_code != 200:
            raise RuntimeError(f"{path}: {answer.status_code} {answer.text[:300]}")
        return answer

    def counts(self) -> tuple[int, int]:
        """(calls, captured calls) visible now, from one snapshot."""
        scope = {
            "tenant_id": SCOPE.tenant,
            "project_id": SCOPE.project,
            "environment_id": SCOPE.environment,
        }
        snapshot = self._post("/query-snapshots", {"scope": scope, "catalog_version": "v1"})
        out = []
        for sql in (self.CALLS, self.CAPTURED):
            query = {
                "snapshot_id": snapshot.json()["snapshot_id"],
                "sql": sql,
                "parameters": [],
                "budget": BUDGET,
            }
            answer = self._post("/resident-queries", query)
            with pa.ipc.open_stream(pa.BufferReader(answer.content)) as reader:
                table = reader.read_all()
            out.append(int(table.column("n")[0].as_py() or 0))
        return out[0], out[1]

    def close(self) -> None:
        self._http.close()


# ------------------------------------------------------------------------------ phases


class Phases:
    """Wall seconds and calls per step of the worker, summed over threads (a call is counted
    when it returns).

    :meth:`install` wraps ``gather_root_ended`` and ``project_executions`` in the worker module's
    namespace (the names it calls), ``ProjectorWorker.ingest_pack`` / ``_ensure_cids``, and the
    control client's, queue's and private store's methods on the instances the ``Projector``
    shares with its workers; :meth:`uninstall` restores them.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.series: dict[str, list[float]] = defaultdict(list)
        """Each call's wall seconds, in completion order."""
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                with self._lock:
                    self.seconds[name] += elapsed
                    self.calls[name] += 1
                    self.series[name].append(elapsed)

        return wrapper

    def snapshot(self) -> Phases:
        """A copy of the figures so far (the wrappers may still be counting)."""
        copy = Phases()
        with self._lock:
            copy.seconds.update(self.seconds)
            copy.calls.update(self.calls)
            copy.series.update({name: list(values) for name, values in self.series.items()})
        return copy

    def quarters(self, name: str) -> tuple[float, float]:
        """Mean ms per call over the first and the last quarter of the calls."""
        values = self.series[name]
        q = max(1, len(values) // 4)
        return sum(values[:q]) / q * 1000, sum(values[-q:]) / q * 1000

    def _patch(self, owner: Any, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)
        setattr(owner, attribute, self.timed(name, original))
        if isinstance(owner, type) or hasattr(owner, "__file__"):
            self._undo.append(lambda: setattr(owner, attribute, original))
        else:  # an instance attribute shadowing the class's method
            self._undo.append(lambda: delattr(owner, attribute))

    def install(self, projector: Any) -> None:
        """Wrap the steps of every worker of ``projector`` (a ``Projector``)."""
        from baml_studio.projector import worker as worker_module

        scope_store = projector.private_store(SCOPE)
        self._patch(worker_module, "gather_root_ended", "gather (bucket reads + decode)")
        if hasattr(worker_module, "project_executions"):  # a slice a call (older: one execution)
            self._patch(worker_module, "project_executions", "project (fold + split, pure)")
        else:
            self._patch(worker_module, "project_execution", "project (fold + split, pure)")
        self._patch(projector.control, "put_batches", "control plane: PUT batches")
        self._patch(projector.control, "active_generation", "control plane: generation")
        self._patch(scope_store, "write_executions", "Lance: private rows + markers")
        self._patch(projector.queue, "receive", "queue: receive (incl. long-poll wait)")
        self._patch(projector.queue, "delete", "queue: delete")
        worker_class = worker_module.ProjectorWorker
        self._patch(worker_class, "ingest_pack", "pack: get + decode + Lance values")
        self._patch(worker_class, "_ensure_cids", "values present? (Lance, CAS fallback)")

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()


class LogCounter(logging.Handler):
    """Counts the projector's warnings and errors by message template (``baml_studio.projector``
    loggers: retries, lost leases, failures), instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: dict[str, int] = defaultdict(int)
        self._logger = logging.getLogger("baml_studio.projector")

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.levelname} {record.name}: {record.msg}"] += 1

    def install(self) -> LogCounter:
        self._logger.addHandler(self)
        return self

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)

    def uninstall(self) -> None:
        self._logger.removeHandler(self)
