"""The steps of one erasure, each idempotent: run again after a crash, it does the same thing or
finds it done (the order and its reasons are in docs/erasure.md)::

    plan            list the scope, read references, decide (plan.py); nothing is deleted
    rehome          entries of the erased streams' packs that are not doomed → cas/values/
    delete_objects  contract step 1: the streams' objects (all versions), rewritten remaining
                    packs, doomed large values and function tables
    erase_facts     contract step 2: POST /projection-erasures, every root id, each generation
    erase_lance     contract step 3: a Lance version without their rows, then doomed values
    verify          after ``settle_s``: facts or Lance rows of the streams that a projector wrote
                    while the steps ran are erased again

Every bucket write is create-only and content-addressed (a rehomed value's key is its CID; a
rewritten pack's flush id derives from the old key and the kept CIDs), every delete tolerates a
missing key, the control plane's erasure is idempotent per ``Idempotency-Key`` and Lance deletes
match nothing the second time. ``stop`` is checked between objects: a closing manager raises
``ErasureStopped`` and the step runs again at the next start.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from baml_studio.erasure.config import ErasureConfig
from baml_studio.erasure.errors import ErasureError, ErasureStopped
from baml_studio.erasure.plan import ErasurePlan, build_plan
from baml_studio.erasure.refs import RefIndex, RefReader, list_keys, list_streams
from baml_studio.erasure.resolve import Resolver
from baml_studio.format.ids import value_cid_wire
from baml_studio.gateway.config import Scope
from baml_studio.gateway.keys import cas_key, evidence_prefix, pack_key
from baml_studio.objectstore.errors import ObjectAlreadyExists
from baml_studio.objectstore.port import ObjectStore
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.errors import EvidenceCorrupt, EvidenceMissing, EvidenceUnavailable
from baml_studio.projector.lance_store import PROJECTED, PrivateStore, sql_literal
from baml_studio.projector.messages import parse_evidence_key
from baml_studio.publisher.pack import compress, pack_body_verified

log = logging.getLogger(__name__)

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_IN_CHUNK = 1000
_GENERATION = re.compile(r"gen_([1-9][0-9]{0,17})")
MAX_GENERATIONS = 10_000
"""The most generations an erasure erases facts in: one request each, ``gen_1`` to the active
one (a rebuild makes the next). A control plane that answers a later one ends the erasure
``failed`` instead of making it build and send billions of requests."""


@dataclass
class StepContext:
    """What the steps of one erasure work with."""

    erasure_id: str
    scope: Scope
    objects: ObjectStore
    control: ControlClient
    private: PrivateStore
    resolver: Resolver
    config: ErasureConfig
    stop: threading.Event
    refs: RefIndex | None = None

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise ErasureStopped(f"erasure {self.erasure_id}: stopped; it resumes at restart")

    def reader(self) -> RefReader:
        return RefReader(
            self.objects, self.scope, self.refs, max_object_bytes=self.config.max_object_bytes
        )


def plan(
    ctx: StepContext, streams: Sequence[str], earlier: Sequence[ErasurePlan] = ()
) -> ErasurePlan:
    """Read the scope and decide everything (:mod:`.plan`); ``earlier`` are the plans of
    earlier erasures of these streams (one that failed part-way left its decisions there)."""
    prefix = evidence_prefix(ctx.scope)
    listing = list_streams(ctx.objects, ctx.scope)
    quarantine = [
        key
        for euid in streams
        for key in list_keys(ctx.objects, f"{prefix}quarantine/streams/{euid}/")
    ]
    other = [
        key
        for key in listing.other
        for euid in streams
        if key.startswith(f"{prefix}streams/{euid}/")
    ]
    extra = ctx.resolver.fact_roots(ctx.scope, streams) | lance_roots(ctx.private, streams)
    extra |= {root for p in earlier for root in p.root_ids}
    reader = ctx.reader()
    try:
        result = build_plan(
            streams, listing, reader, quarantine_keys=quarantine, stream_other_keys=other,
            extra_roots=extra,
            extra_values={bytes.fromhex(c) for p in earlier for c in p.doomed_values},
            extra_tables={bytes.fromhex(c) for p in earlier for c in p.doomed_tables},
        )  # fmt: skip
    finally:
        reader.close()
    for problem in result.stats.corrupt:
        log.warning("erasure %s: references not readable, not counted: %s", ctx.erasure_id, problem)
    return result


def rehome(ctx: StepContext, plan: ErasurePlan) -> int:
    """Copy every entry of the erased streams' packs that is not doomed to ``cas/values/``;
    the number written (entries already there count as written)."""
    doomed = set(plan.doomed_values)
    reader = ctx.reader()
    written = 0
    try:
        for key in plan.packs:
            ctx.check_stop()
            try:
                pack = reader.pack(key)
            except EvidenceMissing:
                continue  # deleted by step 1 of an earlier run: its entries were moved before
            except EvidenceCorrupt as exc:
                log.warning("erasure %s: pack not rehomed (unreadable): %s", ctx.erasure_id, exc)
                continue
            for entry in pack.entries:
                if entry.cid.hex() not in doomed:
                    _put(
                        ctx.objects,
                        cas_key(ctx.scope, "values", entry.cid.hex()),
                        compress(entry.raw),
                    )
                    written += 1
    finally:
        reader.close()
    return written


def delete_objects(ctx: StepContext, plan: ErasurePlan) -> int:
    """Contract step 1 and the bucket side of the reference count; the objects deleted."""
    prefix = evidence_prefix(ctx.scope)
    keys = list(plan.object_keys)
    for euid in plan.streams:  # anything published after planning goes too
        keys += list_keys(ctx.objects, f"{prefix}streams/{euid}/")
    deleted = 0
    for key in dict.fromkeys(keys):
        ctx.check_stop()
        _delete(ctx.objects, key)
        deleted += 1
    doomed = set(plan.doomed_values)
    for key in plan.rewrite_packs:
        ctx.check_stop()
        _rewrite_pack(ctx, key, doomed)
    for cid in plan.doomed_values:
        ctx.check_stop()
        _delete(ctx.objects, cas_key(ctx.scope, "values", cid))
    for cid in plan.doomed_tables:
        ctx.check_stop()
        _delete(ctx.objects, cas_key(ctx.scope, "tables", cid))
    if ctx.refs is not None:
        ctx.refs.forget([*keys, *plan.rewrite_packs])
    return deleted


def erase_facts(ctx: StepContext, root_ids: Sequence[str]) -> tuple[str, ...]:
    """Contract step 2, in the active generation and every earlier one; the generations."""
    active: str = ctx.control.snapshot(ctx.scope)["generation"]
    done = generations_through(active)
    if root_ids:
        for generation in done:
            key = f"{ctx.erasure_id}.{generation}"
            ctx.control.erase_roots(ctx.scope, generation, list(root_ids), key)
    return done


def generations_through(active: str) -> tuple[str, ...]:
    """``gen_1 … gen_<n>`` for the control plane's ``gen_<n>`` naming (facts of an earlier
    generation stay in ClickHouse after a rebuild, and the API lists no generations), else just
    ``active``."""
    match = _GENERATION.fullmatch(active)
    if match is None:
        return (active,)
    last = int(match.group(1))
    if last > MAX_GENERATIONS:
        raise ErasureError(
            f"the scope's active generation is {active}: an erasure walks at most "
            f"{MAX_GENERATIONS:,} generations (one erase request each), so it stops here"
        )
    return tuple(f"gen_{n}" for n in range(1, last + 1))


def erase_lance(ctx: StepContext, root_ids: Sequence[str], doomed_values: Iterable[str]) -> int:
    """Contract step 3, then the doomed values; the number of values removed."""
    if root_ids:
        ctx.private.delete_executions(root_ids)
    return ctx.private.delete_values(value_cid_wire(bytes.fromhex(c)) for c in doomed_values)


@dataclass(frozen=True, slots=True)
class Leftovers:
    root_ids: tuple[str, ...]
    """Executions of the streams still in the facts or in ``projected_v1``."""
    values: tuple[str, ...]
    """Doomed CIDs (64 hex) still in ``values_v1``."""

    def __bool__(self) -> bool:
        return bool(self.root_ids or self.values)


def leftovers(ctx: StepContext, plan: ErasurePlan) -> Leftovers:
    """What a projector wrote for the streams while the steps ran."""
    roots = ctx.resolver.fact_roots(ctx.scope, plan.streams) | lance_roots(
        ctx.private, plan.streams
    )
    wire = {value_cid_wire(bytes.fromhex(c)): c for c in plan.doomed_values}
    present = set(wire) - ctx.private.missing_values(wire)
    return Leftovers(tuple(sorted(roots)), tuple(sorted(wire[w] for w in present)))


def lance_roots(private: PrivateStore, streams: Sequence[str]) -> set[str]:
    """Execution ids with a ``projected_v1`` marker of one of ``streams``."""
    dataset = private.open_dataset(PROJECTED)
    if dataset is None:
        return set()
    found: set[str] = set()
    ordered = sorted(streams)
    for start in range(0, len(ordered), _IN_CHUNK):
        chunk = ordered[start : start + _IN_CHUNK]
        where = f"process_id IN ({', '.join(sql_literal(s) for s in chunk)})"
        try:
            table = dataset.to_table(columns=["execution_id"], filter=where)
        except OSError as exc:
            raise EvidenceUnavailable(f"reading {PROJECTED} failed: {exc}") from exc
        found.update(table["execution_id"].to_pylist())
    return found


def rewritten_flush_id(flush_id: str, key: str, kept: Iterable[bytes]) -> str:
    """The flush id of a pack rewritten without some entries: the old id's time part (its first
    10 characters) and 16 characters of SHA-256 over the old key and the kept CIDs."""
    digest = hashlib.sha256(key.encode() + b"\n" + b"".join(sorted(kept))).digest()
    value = int.from_bytes(digest[:10], "big")
    tail = "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(16)))
    return flush_id[:10] + tail


def _rewrite_pack(ctx: StepContext, key: str, doomed: set[str]) -> None:
    reader = ctx.reader()
    try:
        pack = reader.pack(key)
    except EvidenceMissing:
        return  # rewritten before a crash
    except EvidenceCorrupt as exc:
        log.warning("erasure %s: pack %s not rewritten (unreadable): %s", ctx.erasure_id, key, exc)
        return
    finally:
        reader.close()
    kept = [e for e in pack.entries if e.cid.hex() not in doomed]
    if kept:
        parsed = parse_evidence_key(key)
        assert parsed.euid is not None and parsed.flush_id is not None  # reason: a pack key
        flush_id = rewritten_flush_id(parsed.flush_id, key, (e.cid for e in kept))
        body = compress(pack_body_verified([(e.cid, e.raw, e.sha256) for e in kept]))
        _put(ctx.objects, pack_key(ctx.scope, parsed.euid, flush_id), body)
    _delete(ctx.objects, key)


def _put(objects: ObjectStore, key: str, body: bytes) -> None:
    """Create-only; other store errors propagate with their ``transient`` flag."""
    try:
        objects.put_if_absent(key, body, hashlib.sha256(body).hexdigest())
    except ObjectAlreadyExists:
        return  # content-addressed: the same bytes, or a value the CID already proves


def _delete(objects: ObjectStore, key: str) -> None:
    objects.delete(key, all_versions=True)
