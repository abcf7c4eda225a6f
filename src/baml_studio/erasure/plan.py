"""The erasure plan: everything the later steps need, decided once before anything is deleted.

:func:`build_plan` reads one listing of the scope's ``streams/`` and the references of every
stream object (:mod:`.refs`), then decides:

* ``object_keys``: every object of the erased streams (meta and data segments, value packs, any
  other key under ``streams/<euid>/``, quarantine markers under ``quarantine/streams/<euid>/``).
  Kept in the plan because a key whose current version was deleted no longer lists on a
  versioned bucket while older versions remain; a resumed step deletes the planned keys again,
  with all their versions.
* ``root_ids``: the root ids of the erased streams' ``RootStarted``/``RootEnded`` records, plus
  the ids the facts and ``projected_v1`` know for these streams and those earlier erasures of
  them planned (``extra_roots``), so executions whose meta object is damaged or already deleted
  are erased too. Earlier plans also contribute their doomed CIDs as candidates: an erasure
  that failed after step 1 is finished by a new one that can no longer read the evidence.
* The reference count over the **remaining streams** (every stream of the scope but the erased
  ones, projected or not — the bucket is the authority): with ``V_e``/``T_e`` the value and
  function-table CIDs the erased streams reference and ``V_r``/``T_r`` those the remaining
  streams reference, ``doomed_values = V_e - V_r`` and ``doomed_tables = T_e - T_r``.
* ``packs``: the erased streams' packs. Their entries outside ``doomed_values`` (values of
  remaining streams that this stream's packs carried — the publisher ships every small value of
  a local store in the packs of one stream — and values no stream references yet) are moved to
  ``cas/values/`` before the packs are deleted, so no remaining stream loses a value.
* ``rewrite_packs``: remaining streams' packs that carry a doomed value; each is replaced by a
  pack without the doomed entries, so a replay cannot bring an erased value back.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import asdict, dataclass, field
from typing import Any

from baml_studio.configfile import build
from baml_studio.erasure.errors import ErasureStoreError
from baml_studio.erasure.refs import Listing, RefReader, StreamObject


@dataclass(frozen=True, slots=True)
class PlanStats:
    """What planning read (for the log and docs/erasure.md's cost figures)."""

    remaining_streams: int = 0
    objects_listed: int = 0
    objects_read: int = 0
    objects_cached: int = 0
    corrupt: tuple[str, ...] = ()
    """Objects whose references could not be read (kept out of the count; see the doc)."""


@dataclass(frozen=True, slots=True)
class ErasurePlan:
    streams: tuple[str, ...]
    object_keys: tuple[str, ...]
    packs: tuple[str, ...]
    root_ids: tuple[str, ...]
    doomed_values: tuple[str, ...]
    """Value CIDs (64 hex) no remaining stream references."""
    doomed_tables: tuple[str, ...]
    """Function-table CIDs (64 hex) no remaining stream references."""
    rewrite_packs: tuple[str, ...]
    stats: PlanStats = field(default_factory=PlanStats)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: object) -> ErasurePlan:
        """The plan :meth:`to_json` wrote (``stats`` optional). Anything else (not an object,
        a missing or unknown field, a list holding a non-string) raises ``ErasureStoreError``:
        the erasures file holds a plan this version cannot use."""
        if isinstance(raw, dict) and raw.get("stats", {}) is None:
            raw = {name: value for name, value in raw.items() if name != "stats"}
        return build(cls, raw, "the stored erasure plan", error=ErasureStoreError)


def build_plan(
    streams: Iterable[str],
    listing: Listing,
    reader: RefReader,
    *,
    quarantine_keys: Iterable[str] = (),
    stream_other_keys: Iterable[str] = (),
    extra_roots: Set[str] = frozenset(),
    extra_values: Set[bytes] = frozenset(),
    extra_tables: Set[bytes] = frozenset(),
) -> ErasurePlan:
    """The plan for erasing ``streams`` given one ``listing`` of the scope (module doc).
    ``extra_*`` join what the erased streams' evidence says (root ids from the facts and Lance,
    and what earlier erasures of these streams planned: their evidence may be gone)."""
    erased = sorted(set(streams))
    gone = set(erased)
    erased_objects = [o for e in erased for o in listing.streams.get(e, [])]
    remaining = {e: objs for e, objs in listing.streams.items() if e not in gone}

    roots: set[str] = set(extra_roots)
    values_e: set[bytes] = set(extra_values)
    tables_e: set[bytes] = set(extra_tables)
    for obj in erased_objects:
        refs = reader.refs(obj)
        if refs is None:
            continue
        if obj.kind == "meta":
            tables_e |= refs.cids
            roots.update(refs.roots)
        elif obj.kind == "data":
            values_e |= refs.cids

    values_r: set[bytes] = set()
    tables_r: set[bytes] = set()
    remaining_packs: list[tuple[StreamObject, frozenset[bytes]]] = []
    for objs in remaining.values():
        for obj in objs:
            refs = reader.refs(obj)
            if refs is None:
                continue
            if obj.kind == "meta":
                tables_r |= refs.cids
            elif obj.kind == "data":
                values_r |= refs.cids
            else:
                remaining_packs.append((obj, refs.cids))

    doomed = values_e - values_r
    rewrite = sorted(o.key for o, cids in remaining_packs if cids & doomed)
    counts = reader.counts
    stats = PlanStats(
        remaining_streams=len(remaining),
        objects_listed=sum(len(objs) for objs in listing.streams.values()),
        objects_read=counts.read,
        objects_cached=counts.cached,
        corrupt=tuple(counts.corrupt),
    )
    keys = {o.key for o in erased_objects} | set(quarantine_keys) | set(stream_other_keys)
    return ErasurePlan(
        streams=tuple(erased),
        object_keys=tuple(sorted(keys)),
        packs=tuple(sorted(o.key for o in erased_objects if o.kind == "pack")),
        root_ids=tuple(sorted(roots)),
        doomed_values=tuple(sorted(c.hex() for c in doomed)),
        doomed_tables=tuple(sorted(c.hex() for c in tables_e - tables_r)),
        rewrite_packs=tuple(rewrite),
        stats=stats,
    )
