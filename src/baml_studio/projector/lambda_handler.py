"""The SQS-triggered AWS Lambda entry point: the worker's code over one batch of records.

Handler: ``baml_studio.projector.lambda_handler.handler``. The event source mapping must have
``FunctionResponseTypes: ["ReportBatchItemFailures"]``; keep the function timeout well below
the queue's visibility timeout (AWS suggests a sixth of it), and the queue's redrive policy
(``maxReceiveCount``) pointing at the dead-letter queue.

Concurrency: Lance cannot lock an object store, so one writer per scope's datasets at a time
(``lance_store``): give the function a reserved concurrency of 1 per queue (one queue per data
plane), or two concurrent invocations may both append the same new keys. Throttled batches
stay in the queue and are polled again; nothing is lost.

Maintenance: with no long-running service, the sweep and the compaction the service runs on
its intervals come from a second function on a schedule (an EventBridge rule, every 5 minutes
to hourly), handler ``baml_studio.projector.lambda_handler.maintenance_handler``, same
environment: a scheduled event sweeps and compacts every scope with evidence in the bucket;
a rule's input ``{"tasks": ["sweep"|"compact", …], "scopes": ["tenant/project/environment",
…]}`` chooses (:func:`parse_maintenance_event`). A scope that fails is named in
:class:`~.maintenance.MaintenanceIncomplete`, raised after every other scope ran (the error
metric and the rule's retry see it); no scope is started with less than
:data:`MAINTENANCE_RESERVE_MS` of the invocation left, and each run starts at a random scope.
Compaction commits beside the projector's appends, which
Lance reconciles (a conflict fails that scope's compaction until the next run); give this
function a reserved concurrency of 1 too, so runs of the schedule do not overlap.

Each record (``messageId``, ``receiptHandle``, ``body`` = the S3 event JSON,
``attributes.ApproximateReceiveCount``) goes through :meth:`ProjectorWorker.handle`, exactly as
in the service, over the source queue as an invocation sees it:

==================  =============================================================================
outcome             what the handler does
==================  =============================================================================
deleted             reported as processed: Lambda deletes the record
retry (transient,   the record's visibility is set to the worker's backoff through its receipt
pending)            handle (``ChangeMessageVisibility``; if that fails the queue's own timeout
                    applies) and it is listed in ``batchItemFailures``: it comes back, and after
                    ``maxReceiveCount`` receives SQS moves it to the dead-letter queue
quarantined         the marker is written, the body is sent to the dead-letter queue (a record
                    cannot be moved by its receipt), and it is reported as processed
invalid (not an     not handled: listed in ``batchItemFailures`` and logged with the field at
SQS record)         fault (:class:`LambdaRecordInvalid`); SQS redelivers it and after
                    ``maxReceiveCount`` moves it, as it came, to the dead-letter queue
raised (a bug, the  listed in ``batchItemFailures``, logged by message id
DLQ send failed)
==================  =============================================================================

A record is an SQS record when ``messageId``, ``receiptHandle`` and ``body`` are strings and
``attributes`` (optional) is an object whose ``ApproximateReceiveCount`` (at least 1) and
``SentTimestamp`` (optional) are whole numbers, as digits (SQS's form) or numbers.

When the invocation is about to time out (``context.get_remaining_time_in_millis()`` below
``reserve_ms``) the records not started are listed as failures untouched. An event that is not
an SQS batch raises :class:`LambdaEventInvalid` (the invocation fails; SQS redelivers).

Environment (read once, by :func:`config_from_env`, on the first invocation; the stores and
clients opened then are kept for the life of the execution environment):

=============================  =================================================================
``BAML_CONTROL_PLANE_URL``     required: base URL of the control plane's workload API
``BAML_WORKLOAD_TOKEN``        the workload token; required unless the next is set
``BAML_WORKLOAD_TOKEN_FILE``   a file holding it (an EFS mount a rotator writes), read again
                               whenever it changes: a workload token lives at most an hour,
                               longer than a function's configuration can be kept current
``BAML_DATAPLANE_DIR``         a directory holding ``dataplane.json`` (its ``s3`` and ``sqs``
                               settings; without them the directory bucket and SQLite queue
                               under it). When set, the four below are not read
``BAML_S3_BUCKET``             the evidence bucket (when ``BAML_DATAPLANE_DIR`` is not set); an
                               invalid S3 bucket name is a :class:`LambdaConfigError`
``BAML_SQS_QUEUE``             the projection queue's name; the dead-letter queue is found from
                               its redrive policy
``BAML_S3_ENDPOINT_URL``,      optional endpoint overrides (S3-compatible stores, tests)
``BAML_SQS_ENDPOINT_URL``
``AWS_REGION``                 region of bucket and queue (set by Lambda; default us-east-1)
``BAML_DERIVED_ROOT``          optional root of the Lance datasets (default
                               ``s3://<bucket>/derived/v1``, or ``DIR/derived/v1``)
``BAML_LANCE_KEY_CACHE_KEYS``  optional: keys of Lance fragments remembered, all scopes
                               together (default 1,000,000, about 150 MB; 0 scans every time)
``BAML_SILENCE_LIMIT``         optional: how long a stream is silent before the maintenance's
                               sweep closes its open executions (``1h`` default; ``30m``,
                               ``2h``, ``3600``: units s, m, h, d, w)
``BAML_VERSION_RETENTION``     optional: Lance versions kept by the maintenance's compaction
                               (``7d`` default; the same units)
=============================  =================================================================

Credentials for S3, SQS and Lance come from the function's execution role (boto3's and
object_store's default chains read the variables Lambda sets).
"""

from __future__ import annotations

import json
import logging
import os
import random
import reprlib
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from baml_studio.configfile import ConfigError
from baml_studio.gateway.config import Scope
from baml_studio.gateway.service import DataplaneConfig, load_dataplane_config
from baml_studio.objectstore.config import S3Config, validate_bucket_name
from baml_studio.objectstore.errors import InvalidArgument
from baml_studio.projector.compact import parse_duration, parse_scope
from baml_studio.projector.errors import ProjectorError
from baml_studio.projector.lance_store import DEFAULT_KEY_CACHE_KEYS
from baml_studio.projector.maintenance import TASKS, run_maintenance
from baml_studio.projector.service import (
    DEFAULT_RETENTION_S,
    DEFAULT_SILENCE_S,
    Projector,
    ProjectorConfig,
    open_projector,
)
from baml_studio.projector.worker import ProjectorWorker
from baml_studio.queue.config import SqsQueueConfig, check_queue_name
from baml_studio.queue.errors import QueueError
from baml_studio.queue.port import Message, Queue
from baml_studio.servergc import tune_for_serving
from baml_studio.tokenfile import TokenFile

log = logging.getLogger(__name__)
T = TypeVar("T")

RESERVE_MS = 10_000
"""Records are not started with less than this much invocation time left."""

MAINTENANCE_RESERVE_MS = 120_000
"""The maintenance starts no scope's sweep or compaction with less than this much invocation
time left (the ones not started are named in ``MaintenanceIncomplete``; each invocation
starts at a random scope, so a cut-short run does not leave the same ones behind)."""

LAMBDA_DATA_DIR = Path("/tmp/baml-dataplane")
"""``DataplaneConfig.data_dir`` in S3 mode (nothing is written there)."""

BatchResponse = dict[str, list[dict[str, str]]]

MAX_ATTRIBUTE = 2**63 - 1
"""The largest whole-number attribute a record may carry (SQS's are far smaller)."""


class LambdaConfigError(ProjectorError):
    """The function's environment is incomplete or wrong; fix the variables named."""

    transient = False


class LambdaEventInvalid(ProjectorError):
    """The event is not an SQS batch (``{"Records": [{"messageId": …}, …]}``)."""

    transient = False


class LambdaRecordInvalid(ProjectorError):
    """One record of an SQS batch is not an SQS record (a field missing, or not of the type
    SQS sends); the others are handled, this one is left for redelivery."""

    transient = False


def config_from_env(environ: Mapping[str, str] | None = None) -> ProjectorConfig:
    """The projector's configuration from the variables in the module docstring."""
    env = os.environ if environ is None else environ

    def required(name: str) -> str:
        value = env.get(name, "").strip()
        if not value:
            raise LambdaConfigError(f"set {name} in the function's environment")
        return value

    url = required("BAML_CONTROL_PLANE_URL")
    token_file = env.get("BAML_WORKLOAD_TOKEN_FILE", "").strip()
    token: str | TokenFile = (
        _valid(
            "BAML_WORKLOAD_TOKEN_FILE",
            token_file,
            lambda path: TokenFile(Path(path)),
            "write the workload token to it",
        )
        if token_file
        else required("BAML_WORKLOAD_TOKEN")
    )
    derived = env.get("BAML_DERIVED_ROOT") or None
    key_cache = env.get("BAML_LANCE_KEY_CACHE_KEYS", "").strip()
    if key_cache and not (key_cache.isascii() and key_cache.isdigit()):
        raise LambdaConfigError(
            f"BAML_LANCE_KEY_CACHE_KEYS must be a whole number of keys, not {key_cache!r}"
        )
    keys = int(key_cache) if key_cache else DEFAULT_KEY_CACHE_KEYS
    silence = _duration(env, "BAML_SILENCE_LIMIT", DEFAULT_SILENCE_S)
    retention = _duration(env, "BAML_VERSION_RETENTION", DEFAULT_RETENTION_S)
    try:
        if env.get("BAML_DATAPLANE_DIR"):
            dataplane = load_dataplane_config(
                Path(env["BAML_DATAPLANE_DIR"]), host="127.0.0.1", port=8787
            )
        else:
            region = env.get("AWS_REGION") or "us-east-1"
            bucket = _valid(
                "BAML_S3_BUCKET",
                required("BAML_S3_BUCKET"),
                validate_bucket_name,
                "set it to the name of the evidence bucket",
            )
            dataplane = DataplaneConfig(
                data_dir=LAMBDA_DATA_DIR,
                public_base_url="http://127.0.0.1:8787",
                bucket=bucket,
                s3=S3Config(
                    bucket=bucket,
                    region=region,
                    endpoint_url=env.get("BAML_S3_ENDPOINT_URL") or None,
                ),
                sqs=SqsQueueConfig(
                    name=_valid(
                        "BAML_SQS_QUEUE",
                        required("BAML_SQS_QUEUE"),
                        check_queue_name,
                        "set it to the name of the projection queue",
                    ),
                    region=region,
                    endpoint_url=env.get("BAML_SQS_ENDPOINT_URL") or None,
                ),
            )
    except LambdaConfigError:
        raise
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise LambdaConfigError(f"data-plane configuration: {exc}") from exc
    return ProjectorConfig(
        dataplane,
        url,
        token,
        derived_root=derived,
        lance_key_cache_keys=keys,
        silence_limit_s=silence,
        version_retention_s=retention,
    )


def _valid(variable: str, value: str, check: Callable[[str], T], fix: str) -> T:
    """``check(value)`` of ``variable``, or a :class:`LambdaConfigError` naming the variable,
    the rule it breaks and ``fix`` when ``check`` refuses it."""
    try:
        return check(value)
    except (InvalidArgument, ValueError) as exc:
        raise LambdaConfigError(f"{variable}: {exc}; {fix}") from None


def _duration(env: Mapping[str, str], name: str, default: float) -> float:
    """Seconds of the duration in ``name`` (``30m``, ``7d``, …; more than 0), or ``default``
    if unset."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError as exc:
        raise LambdaConfigError(f"{name}: {exc}") from None
    if seconds <= 0:
        raise LambdaConfigError(f"{name} must be longer than 0, not {text!r}")
    return seconds


class InvocationQueue:
    """The source queue as one invocation sees it: the event source mapping polls and deletes,
    so :meth:`receive` finds nothing and :meth:`delete` leaves the record to Lambda; a visibility
    change goes to the source queue by receipt handle (best effort); a quarantined record's body
    is sent to the dead-letter queue."""

    def __init__(self, source: Queue) -> None:
        self.source = source

    def send(self, body: str, *, delay_s: int = 0) -> str:
        return self.source.send(body, delay_s=delay_s)

    def receive(
        self,
        max_messages: int = 10,
        wait_s: float = 0,
        visibility_timeout_s: int | None = None,
    ) -> list[Message]:
        return []

    def delete(self, receipt: str) -> None:
        """Lambda deletes every record the response does not list as failed."""

    def change_visibility(self, receipt: str, timeout_s: int) -> None:
        try:
            self.source.change_visibility(receipt, timeout_s)
        except QueueError as exc:
            log.warning("visibility change failed (%s); the queue's timeout applies", exc)

    def send_to_dead_letter(self, message: Message, reason: str) -> None:
        self.source.dead_letter_queue().send(message.body)
        log.warning("message %s sent to the dead-letter queue: %s", message.id, reason[:300])

    def dead_letter_queue(self) -> Queue:
        return self.source.dead_letter_queue()

    def approximate_count(self) -> int:
        return self.source.approximate_count()


def lambda_worker(projector: Projector) -> ProjectorWorker:
    """The worker of an execution environment: the projector's stores, the invocation queue."""
    return ProjectorWorker(
        store=projector.store,
        queue=InvocationQueue(projector.queue),
        control=projector.control,
        private_store=projector.private_store,
        config=projector.config.worker,
    )


def process_event(
    worker: ProjectorWorker,
    event: Any,
    *,
    remaining_ms: Callable[[], int] | None = None,
    reserve_ms: int = RESERVE_MS,
) -> BatchResponse:
    """Handle every record of ``event``; the partial-batch response (records to retry)."""
    records = _records(event)
    failures: list[dict[str, str]] = []
    outcomes: Counter[str] = Counter()
    for index, record in enumerate(records):
        if remaining_ms is not None and remaining_ms() < reserve_ms:
            rest = [r["messageId"] for r in records[index:]]
            failures.extend({"itemIdentifier": m} for m in rest)
            outcomes["deferred"] += len(rest)
            log.warning("out of time: %d record(s) left for redelivery", len(rest))
            break
        outcome = _handle(worker, record)
        outcomes[outcome] += 1
        if outcome in ("retry", "invalid", "error"):
            failures.append({"itemIdentifier": record["messageId"]})
    log.info(
        "batch of %d: %s",
        len(records),
        " ".join(f"{name}={count}" for name, count in sorted(outcomes.items())),
    )
    return {"batchItemFailures": failures}


class _KeptProjector:
    """The :class:`Projector` an execution environment opens with ``open_projector_`` on its
    first invocation and keeps for the later ones."""

    def __init__(self, open_projector_: Callable[[], Projector]) -> None:
        self._open = open_projector_
        self._lock = threading.Lock()
        self._projector: Projector | None = None

    def _opened(self) -> Projector:
        """The kept projector, opened now if need be (the caller holds ``_lock``)."""
        if self._projector is None:
            self._projector = self._open()
        return self._projector

    def _forget(self) -> None:
        """Drop what was built over the projector (``close`` holds ``_lock``)."""

    def close(self) -> None:
        """Close the projector if one was opened (tests; Lambda just freezes the process)."""
        with self._lock:
            if self._projector is not None:
                self._projector.close()
            self._projector = None
            self._forget()


class LambdaEntryPoint(_KeptProjector):
    """A Lambda handler that opens its :class:`Projector` with ``open_projector_`` on the first
    invocation and keeps it (and its worker) for the later ones of the execution environment."""

    def __init__(
        self, open_projector_: Callable[[], Projector], *, reserve_ms: int = RESERVE_MS
    ) -> None:
        super().__init__(open_projector_)
        self._reserve_ms = reserve_ms
        self._worker: ProjectorWorker | None = None

    def __call__(self, event: Any, context: Any) -> BatchResponse:
        with self._lock:
            if self._worker is None:
                self._worker = lambda_worker(self._opened())
            worker = self._worker
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        return process_event(
            worker,
            event,
            remaining_ms=remaining if callable(remaining) else None,
            reserve_ms=self._reserve_ms,
        )

    def _forget(self) -> None:
        self._worker = None


def open_from_env() -> Projector:
    """The projector the function's environment names (:func:`config_from_env`). A file of the
    data-plane directory that cannot be used (a short ``keys/presign.key``) is a
    :class:`LambdaConfigError` too."""
    config = config_from_env()
    try:
        return open_projector(config)
    except ConfigError as exc:
        raise LambdaConfigError(f"BAML_DATAPLANE_DIR: {exc}") from exc


def open_for_serving() -> Projector:
    """:func:`open_from_env`, then this process's collector tuned as the projector CLI's
    (``servergc``): an execution environment runs only the function and keeps the projector
    for its later invocations. The module's entry points open with it."""
    projector = open_from_env()
    tune_for_serving()
    return projector


_ENTRY_POINT = LambdaEntryPoint(open_for_serving)


def handler(event: Any, context: Any) -> BatchResponse:
    """The Lambda entry point (``baml_studio.projector.lambda_handler.handler``)."""
    return _ENTRY_POINT(event, context)


def parse_maintenance_event(event: Any) -> tuple[tuple[str, ...], tuple[Scope, ...] | None]:
    """``(tasks, scopes)`` of a maintenance invocation: an EventBridge scheduled event (or any
    object without the two fields) runs both tasks over every discovered scope; a schedule's
    input ``{"tasks": ["sweep", "compact"], "scopes": ["tenant/project/environment", …]}``
    chooses. :class:`LambdaEventInvalid` for anything else (an SQS batch included)."""
    if not isinstance(event, Mapping) or "Records" in event:
        raise LambdaEventInvalid(
            "a maintenance event is an EventBridge scheduled event or {'tasks': [...], "
            "'scopes': [...]}; check the function's trigger (SQS batches go to handler)"
        )
    tasks: tuple[str, ...] = TASKS
    if "tasks" in event:
        chosen = event["tasks"]
        if (
            not isinstance(chosen, list)
            or not chosen
            or not all(isinstance(t, str) and t in TASKS for t in chosen)
        ):
            raise LambdaEventInvalid(
                f"maintenance 'tasks' must be a non-empty list of {list(TASKS)}, got "
                f"{reprlib.repr(chosen)}"
            )
        tasks = tuple(t for t in TASKS if t in chosen)
    if "scopes" not in event:
        return tasks, None
    named = event["scopes"]
    if not isinstance(named, list) or not all(isinstance(s, str) for s in named):
        raise LambdaEventInvalid(
            f"maintenance 'scopes' must be a list of 'tenant/project/environment', got "
            f"{reprlib.repr(named)}"
        )
    try:
        return tasks, tuple(sorted({parse_scope(text) for text in named}))
    except ValueError as exc:
        raise LambdaEventInvalid(f"maintenance 'scopes': {exc}") from None


class MaintenanceEntryPoint(_KeptProjector):
    """The scheduled maintenance handler: opens its :class:`Projector` on the first
    invocation, then runs :func:`~.maintenance.run_maintenance` for each event."""

    def __init__(
        self,
        open_projector_: Callable[[], Projector],
        *,
        reserve_ms: int = MAINTENANCE_RESERVE_MS,
        rotate: Callable[[], int] = lambda: random.randrange(1 << 30),
    ) -> None:
        super().__init__(open_projector_)
        self._reserve_ms = reserve_ms
        self._rotate = rotate

    def __call__(self, event: Any, context: Any) -> dict[str, Any]:
        tasks, scopes = parse_maintenance_event(event)
        remaining = getattr(context, "get_remaining_time_in_millis", None)

        def stop() -> bool:  # no scope is started with less than the reserve left
            return callable(remaining) and remaining() < self._reserve_ms

        with self._lock:  # one maintenance at a time per execution environment
            report = run_maintenance(
                self._opened(), tasks, scopes, stop=stop, rotate=self._rotate()
            )
        body = report.as_dict()
        log.info("maintenance %s: %s", ",".join(tasks), json.dumps(body, default=str))
        report.raise_for_failures()
        return body


_MAINTENANCE = MaintenanceEntryPoint(open_for_serving)


def maintenance_handler(event: Any, context: Any) -> dict[str, Any]:
    """The scheduled entry point (``baml_studio.projector.lambda_handler.maintenance_handler``):
    the sweep and the compaction, as the service runs them on its intervals."""
    return _MAINTENANCE(event, context)


def _records(event: Any) -> Sequence[Mapping[str, Any]]:
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list) or not all(
        isinstance(r, Mapping) and isinstance(r.get("messageId"), str) for r in records
    ):
        raise LambdaEventInvalid(
            "the event is not an SQS batch: expected {'Records': [{'messageId': …, "
            "'receiptHandle': …, 'body': …}, …]}; check the function's trigger"
        )
    return records


def _handle(worker: ProjectorWorker, record: Mapping[str, Any]) -> str:
    """One record's outcome: the worker's, ``invalid`` (not an SQS record, never handled) or
    ``error`` (handling raised)."""
    message_id = record["messageId"]
    try:
        message = _message(record)
    except LambdaRecordInvalid as exc:
        log.warning("message %s left for redelivery: %s", message_id, exc)
        return "invalid"
    try:
        return worker.handle(message)
    except Exception as exc:  # a bug or a failed DLQ send: SQS redelivers the record
        log.error(
            "message %s: %s; left for redelivery", message_id, type(exc).__name__, exc_info=True
        )
        return "error"


_ABSENT = object()


def _message(record: Mapping[str, Any]) -> Message:
    """One record as a queue :class:`Message`, taken as it came (no field converted to text);
    :class:`LambdaRecordInvalid` naming the field if it is not an SQS record."""
    for name in ("messageId", "receiptHandle", "body"):
        if not isinstance(record.get(name), str):
            raise _invalid(record, name, record.get(name, _ABSENT), "a string")
    attributes = record.get("attributes", {})
    if not isinstance(attributes, Mapping):
        raise _invalid(record, "attributes", attributes, "an object")
    return Message(
        id=record["messageId"],
        receipt=record["receiptHandle"],
        body=record["body"],
        receive_count=_whole(record, attributes, "ApproximateReceiveCount", 1, minimum=1),
        sent_at=_whole(record, attributes, "SentTimestamp", 0, minimum=0) / 1000,
    )


def _whole(
    record: Mapping[str, Any],
    attributes: Mapping[str, Any],
    name: str,
    default: int,
    *,
    minimum: int,
) -> int:
    """The attribute ``name`` (``default`` when absent): a whole number from ``minimum`` to
    :data:`MAX_ATTRIBUTE`, as digits (SQS sends ``"1"``) or a number."""
    value = attributes.get(name, default)
    number: int | None = None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    if number is None or not minimum <= number <= MAX_ATTRIBUTE:
        raise _invalid(record, f"attributes.{name}", value, f"a whole number from {minimum}")
    return number


def _invalid(record: Mapping[str, Any], field: str, value: Any, wanted: str) -> LambdaRecordInvalid:
    got = "nothing" if value is _ABSENT else f"{type(value).__name__} {reprlib.repr(value)}"
    message_id = record.get("messageId")
    which = f"record {reprlib.repr(message_id)}" if isinstance(message_id, str) else "a record"
    return LambdaRecordInvalid(
        f"{which} is not an SQS record: {field} must be {wanted}, got {got}; check what "
        "invokes the function (its trigger must be the SQS queue's event source mapping)"
    )
