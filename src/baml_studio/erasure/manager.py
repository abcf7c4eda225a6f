"""Erasures: accepted by ``create``, run one at a time by a worker thread, resumed after a crash.

States (``Erasure.state``; system contract, "State machines")::

    queued ──> running ──> succeeded     every step done (streams_deleted = streams_matched)
                  └──────> failed        a step failed terminally (its error is in the Erasure)

Inside ``running`` the erasure moves through the steps of :mod:`.steps`, each persisted in the
erasures file before the next begins::

    plan → rehome → delete_objects → erase_facts → erase_lance → verify → done
           (1: bucket)               (2: facts)    (3: Lance)

A transient failure (bucket, control plane or Lance unavailable) is retried with exponential
backoff (``retry_initial_s`` doubling to ``retry_max_s``) and never ends the erasure; anything
else fails it. A crash or :meth:`ErasureManager.close` leaves the erasure ``running`` at its
recorded step; the next manager over the same file resumes it there (every step is idempotent).

One worker thread runs erasures in creation order, never two at once: each one's reference count
must see the streams erased before it as gone, and the streams erased after it as remaining.

``create`` resolves the selector synchronously (:mod:`.resolve`), so a request naming another
scope's stream, an unknown execution or a malformed selector is refused before anything is
stored. The same ``Idempotency-Key`` in the same scope returns the same erasure (whatever its
state); with a different selector it is 409 ``idempotency_key_reused``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baml_studio.apierrors import DependencyUnavailable, NotFound, key_reused
from baml_studio.control.identity import UserIdentity
from baml_studio.erasure import steps
from baml_studio.erasure.config import ErasureConfig
from baml_studio.erasure.errors import ErasureStopped, is_transient
from baml_studio.erasure.plan import ErasurePlan
from baml_studio.erasure.refs import RefIndex
from baml_studio.erasure.resolve import Resolver
from baml_studio.erasure.selector import Selector
from baml_studio.erasure.store import ErasureRecord, ErasureStore, Step
from baml_studio.gateway.config import Scope
from baml_studio.objectstore.port import ObjectStore
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.lance_store import PrivateStore

log = logging.getLogger(__name__)

AfterStep = Callable[[str, Step], None]
IDLE_POLL_S = 60.0


class ErasureManager:
    """Creates, reports and runs erasures (module docstring)."""

    def __init__(
        self,
        store: ErasureStore,
        objects: ObjectStore,
        control: ControlClient,
        private_store: Callable[[Scope], PrivateStore],
        *,
        config: ErasureConfig | None = None,
        refs: RefIndex | None = None,
        on_values_erased: Callable[[Scope], None] | None = None,
        after_step: AfterStep | None = None,
        start: bool = True,
    ) -> None:
        self._store, self._objects, self._control = store, objects, control
        self._private_store = private_store
        self.config = config or ErasureConfig()
        self._refs = refs
        self._on_values_erased = on_values_erased
        self._after_step = after_step
        self._resolver = Resolver(control, objects, store.erased_streams)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._work, name="erasure-worker", daemon=True)
        if start:
            self._thread.start()

    @classmethod
    def open(
        cls,
        directory: Path,
        objects: ObjectStore,
        control: ControlClient,
        private_store: Callable[[Scope], PrivateStore],
        **kwargs: Any,
    ) -> ErasureManager:
        """A manager over ``directory/erasures.sqlite`` (and ``refs.sqlite`` unless the config
        turns the index off); unfinished erasures resume at once."""
        config: ErasureConfig = kwargs.pop("config", None) or ErasureConfig()
        store = ErasureStore(directory / "erasures.sqlite")
        refs = RefIndex(directory / "refs.sqlite") if config.refs_cache else None
        return cls(store, objects, control, private_store, config=config, refs=refs, **kwargs)

    # --- the two operations --------------------------------------------------------------------

    def create(
        self, scope: Scope, selector: Selector, idempotency_key: str
    ) -> tuple[dict[str, Any], bool]:
        """``(Erasure JSON, created)``: a new queued erasure, or the one the key names."""
        if self._stop.is_set():
            raise DependencyUnavailable(
                "the data plane is shutting down; retry shortly", code="erasure_closing"
            )
        canonical = selector.canonical()
        held = self._store.find(scope, idempotency_key)
        if held is not None:
            return _replayed(held, canonical), False
        streams = self._resolver.resolve(scope, selector)
        record = self._store.create(scope, canonical, idempotency_key, streams)
        if record.selector != canonical or record.streams != streams:
            return _replayed(record, canonical), False  # a concurrent create took the key
        log.info(
            "erasure %s queued scope=%s/%s/%s streams=%d",
            record.erasure_id, scope.tenant, scope.project, scope.environment, len(streams),
        )  # fmt: skip
        self._wake.set()
        return record.to_json(), True

    def get(self, erasure_id: str, identity: UserIdentity) -> dict[str, Any]:
        """The ``Erasure``; 404 when it does not exist in the token's scope."""
        record = self._store.get(erasure_id)
        if record is None or not identity.grants(record.scope):
            raise NotFound(
                f"no erasure {erasure_id!r} in this token's scope", code="erasure_not_found"
            )
        return record.to_json()

    def record(self, erasure_id: str) -> ErasureRecord | None:
        """The stored record (operators and tests)."""
        return self._store.get(erasure_id)

    def wait(self, erasure_id: str, timeout_s: float) -> ErasureRecord:
        """The record once it is final, or as it is after ``timeout_s`` (tests, ``--wait``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            record = self._store.get(erasure_id)
            if record is None:
                raise KeyError(f"no erasure {erasure_id!r}")
            if record.state in ("succeeded", "failed"):
                return record
            if time.monotonic() >= deadline:
                return record
            time.sleep(0.02)

    def run_pending(self) -> None:
        """Run every unfinished erasure in this thread (a manager made with ``start=False``)."""
        while (pending := self._store.unfinished()) and not self._stop.is_set():
            self._run(pending[0])

    def close(self) -> None:
        """Stop the worker between objects; an erasure in progress resumes at the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._refs is not None:
            self._refs.close()
        self._store.close()

    # --- the worker ----------------------------------------------------------------------------

    def _work(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                pending = self._store.unfinished()
                if pending:
                    self._run(pending[0])
                    continue
            except Exception as exc:  # the worker thread must outlive a failed pass
                log.exception("erasure worker pass failed: %s", exc)
                self._stop.wait(self.config.retry_initial_s)
                continue
            self._wake.wait(IDLE_POLL_S)

    def _run(self, record: ErasureRecord) -> None:
        if not self._store.start(record.erasure_id):
            return
        ctx = steps.StepContext(
            record.erasure_id, record.scope, self._objects, self._control,
            self._private_store(record.scope), self._resolver, self.config, self._stop,
            self._refs,
        )  # fmt: skip
        while True:
            current = self._store.get(record.erasure_id)
            if current is None or current.state != "running":
                return
            if not current.streams:
                self._store.succeed(current.erasure_id, 0)
                return
            try:
                self._step(ctx, current)
            except ErasureStopped:
                return
            except Exception as exc:  # every failure is classified: retried or final
                if not is_transient(exc):
                    log.exception("erasure %s failed at %s", current.erasure_id, current.step)
                    self._store.fail(current.erasure_id, _error(current.step, exc))
                    return
                attempts = self._store.record_attempt(
                    current.erasure_id, f"{type(exc).__name__}: {exc}"
                )
                delay = min(
                    self.config.retry_max_s, self.config.retry_initial_s * 2 ** (attempts - 1)
                )
                log.warning(
                    "erasure %s: step %s failed (attempt %d), retrying in %.1fs: %s",
                    current.erasure_id, current.step, attempts, delay, exc,
                )  # fmt: skip
                if self._stop.wait(delay):
                    return
                continue
            if self._after_step is not None:
                self._after_step(current.erasure_id, current.step)

    def _step(self, ctx: steps.StepContext, record: ErasureRecord) -> None:
        """Run the record's current step and persist the next one."""
        erasure_id = record.erasure_id
        if record.step == "plan":
            earlier = self._store.earlier_plans(record.scope, record.streams)
            made = steps.plan(ctx, record.streams, [ErasurePlan.from_json(p) for p in earlier])
            log.info("erasure %s planned: %s", erasure_id, _summary(made))
            self._store.advance(erasure_id, "rehome", made.to_json())
            return
        assert record.plan is not None, erasure_id  # reason: every later step has a plan
        plan = ErasurePlan.from_json(record.plan)
        if record.step == "rehome":
            moved = steps.rehome(ctx, plan)
            log.info("erasure %s: %d pack entries kept under cas/values/", erasure_id, moved)
            self._store.advance(erasure_id, "delete_objects")
        elif record.step == "delete_objects":
            deleted = steps.delete_objects(ctx, plan)
            log.info("erasure %s: %d stream objects deleted", erasure_id, deleted)
            self._store.advance(erasure_id, "erase_facts")
        elif record.step == "erase_facts":
            generations = steps.erase_facts(ctx, plan.root_ids)
            log.info("erasure %s: facts erased in %s", erasure_id, ", ".join(generations))
            self._store.advance(erasure_id, "erase_lance")
        elif record.step == "erase_lance":
            steps.erase_lance(ctx, plan.root_ids, plan.doomed_values)
            self._values_erased(ctx.scope)
            self._store.advance(erasure_id, "verify")
        elif record.step == "verify":
            self._verify(ctx, plan)
            self._store.succeed(erasure_id, len(plan.streams))
            log.info("erasure %s succeeded: %d streams", erasure_id, len(plan.streams))

    def _verify(self, ctx: steps.StepContext, plan: ErasurePlan) -> None:
        if self._stop.wait(self.config.settle_s):
            ctx.check_stop()
        left = steps.leftovers(ctx, plan)
        if not left:
            return
        log.warning(
            "erasure %s: %d executions and %d values were written during the erasure; erasing "
            "them again", ctx.erasure_id, len(left.root_ids), len(left.values),
        )  # fmt: skip
        if left.root_ids:
            generation: str = ctx.control.snapshot(ctx.scope)["generation"]
            key = f"{ctx.erasure_id}.verify.{generation}"
            ctx.control.erase_roots(ctx.scope, generation, list(left.root_ids), key)
        steps.erase_lance(ctx, left.root_ids, left.values)
        self._values_erased(ctx.scope)

    def _values_erased(self, scope: Scope) -> None:
        if self._on_values_erased is not None:
            self._on_values_erased(scope)


def _replayed(record: ErasureRecord, canonical: str) -> dict[str, Any]:
    if record.selector != canonical:
        raise key_reused(
            holder="erasure",
            holder_id=record.erasure_id,
            id_field="erasure_id",
            compared="selector",
            new="erasure",
        )
    return record.to_json()


def _error(step: str, exc: BaseException) -> dict[str, Any]:
    return {
        "code": "erasure_step_failed",
        "message": f"step {step} failed: {type(exc).__name__}: {exc}",
        "retryable": False,
        "remedy": "fix the cause named here, then request the erasure again with a new "
        "Idempotency-Key (the steps already done are harmless to repeat)",
    }


def _summary(plan: ErasurePlan) -> str:
    return (
        f"streams={len(plan.streams)} objects={len(plan.object_keys)} roots={len(plan.root_ids)} "
        f"doomed_values={len(plan.doomed_values)} doomed_tables={len(plan.doomed_tables)} "
        f"rewrite_packs={len(plan.rewrite_packs)} remaining_streams={plan.stats.remaining_streams} "
        f"read={plan.stats.objects_read} cached={plan.stats.objects_cached}"
    )
