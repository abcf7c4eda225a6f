"""Hydration of value handles, with an LRU of decoded values and the evaluation counters.

A :class:`ValueResolver` lives for one query. Every evaluation of a non-NULL handle counts once
in ``valueEvaluations``: ``available`` when the value (at its path) could be produced, or
``unavailable`` by reason — the handle's own loss reason, or the reading/decoding failure
(``lost``, ``corrupt``, ``truncated``, ``unsupported``, ``store_unavailable``), or ``omitted``
when the navigation meets a value the producer did not capture. An absent path or a captured
``null`` is *available* (it is an answer, just NULL).

Budgets: reading a body counts one hydration and its size towards ``max_decoded_bytes``; a body
above ``max_value_bytes`` is ``truncated``. Running out of hydrations, decoded bytes or wall time
records a :class:`~baml_studio.query.errors.BudgetExceeded` in :attr:`ValueResolver.exhausted`
and raises it; the evaluation that hit it counts as ``query_budget_exhausted``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from baml_studio.catalog.handles import Available, InvalidHandle, decode_handle
from baml_studio.catalog.source import CatalogSource, ValueUnavailable
from baml_studio.format.errors import ValueCorrupt
from baml_studio.format.values import Value, ValueTooDeep, decode_value
from baml_studio.query.config import QueryBudgets
from baml_studio.query.errors import BudgetExceeded
from baml_studio.query.outcome import UNAVAILABLE_REASONS, ValueEvaluations
from baml_studio.query.semantics import OmittedAt, Path, navigate

CACHE_ENTRIES = 4096
VALUE_CODEC = 1


class Unavailable(str):
    """A cached unavailable reason (a ``str`` subclass so it is distinct from a value)."""

    __slots__ = ()


class DecodedValues:
    """Decoded codec-1 values by CID, shared by the queries of a long-lived process (the
    coordinator): a CID names its bytes, and values are immutable, so an entry never goes
    stale. LRU, bounded by ``max_entries`` and by the summed body lengths ``max_body_bytes``
    (a decoded value takes roughly ten to twenty times its body in Python objects).

    Only the decoding is shared: each query still reads the body through its source (budgets,
    private-bytes accounting and unavailability are per query as before), then finds the
    decoded value here instead of decoding it again."""

    def __init__(self, max_entries: int = 100_000, max_body_bytes: int = 64 << 20) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_body_bytes
        self._bytes = 0
        self._entries: OrderedDict[bytes, tuple[Value, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, cid: bytes) -> Value | None:
        with self._lock:
            entry = self._entries.get(cid)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(cid)
            self.hits += 1
            return entry[0]

    def put(self, cid: bytes, value: Value, body_bytes: int) -> None:
        if body_bytes > self._max_bytes // 8 or self._max_entries <= 0:
            return
        with self._lock:
            if cid in self._entries:
                return
            self._entries[cid] = (value, body_bytes)
            self._bytes += body_bytes
            while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
                _, (_, size) = self._entries.popitem(last=False)
                self._bytes -= size

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


class ValueResolver:
    def __init__(
        self,
        source: CatalogSource,
        budgets: QueryBudgets,
        deadline: float,
        clock: Callable[[], float] = time.monotonic,
        decoded: DecodedValues | None = None,
    ) -> None:
        self._decoded = decoded
        self._source = source
        self._budgets = budgets
        self._deadline = deadline
        self._clock = clock
        self._lock = threading.RLock()
        self._cache: OrderedDict[tuple[int, bytes], Value | Unavailable] = OrderedDict()
        self.evaluations = ValueEvaluations()
        self.hydrations = 0
        self.decoded_bytes = 0
        self.exhausted: BudgetExceeded | None = None

    def check_deadline(self, *, evaluating: bool = False) -> None:
        """Raise :class:`BudgetExceeded` (and remember it) once the wall budget is spent;
        ``evaluating`` counts the evaluation in progress as ``query_budget_exhausted``."""
        if self.exhausted is not None:
            raise self.exhausted
        if self._clock() > self._deadline:
            self._exhaust(
                f"the query ran longer than its wall budget of {self._budgets.max_wall_s:g}s",
                "narrow the query (for example WHERE execution_id = '…') or raise "
                f"{self._budgets.wall_setting}",
                evaluating,
            )

    def evaluate(self, handle: bytes | None, path: Path = ()) -> Value | None:
        """The value at ``path`` inside the handle's value, counted; None when the handle is
        NULL (not applicable, not counted), the path is absent, or the value is unavailable."""
        if handle is None:
            return None
        with self._lock:
            body = self._hydrate(handle)
            if isinstance(body, Unavailable):
                self.evaluations.count_unavailable(str(body))
                return None
            try:
                found = navigate(body, path)
            except OmittedAt:
                self.evaluations.count_unavailable("omitted")
                return None
            self.evaluations.count_available()
            return found

    def cid_of(self, handle: bytes | None) -> bytes | None:
        """The CID of an available handle (counted like an evaluation, without reading)."""
        if handle is None:
            return None
        try:
            decoded = decode_handle(handle)
        except InvalidHandle:
            self.evaluations.count_unavailable("corrupt")
            return None
        if not isinstance(decoded, Available):
            self.evaluations.count_unavailable(decoded.unavailable_reason())
            return None
        self.evaluations.count_available()
        return decoded.cid

    def _hydrate(self, handle: bytes) -> Value | Unavailable:
        try:
            decoded = decode_handle(handle)
        except InvalidHandle:
            return Unavailable("corrupt")
        if not isinstance(decoded, Available):
            return Unavailable(decoded.unavailable_reason())
        key = (decoded.codec, decoded.cid)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        result = self._read(decoded)
        self._cache[key] = result
        if len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)
        return result

    def _read(self, handle: Available) -> Value | Unavailable:
        if handle.codec != VALUE_CODEC:
            return Unavailable("unsupported")
        if self.hydrations >= self._budgets.max_hydrations:
            self._exhaust(
                f"the query needed more than {self._budgets.max_hydrations} value bodies",
                "narrow the query so it reads fewer values, or raise max_hydrations",
            )
        self.check_deadline(evaluating=True)
        self.hydrations += 1
        limit = self._budgets.max_value_bytes
        try:
            body = self._source.read_value(handle.codec, handle.cid, limit)
        except ValueUnavailable as exc:
            reason = exc.reason if exc.reason in UNAVAILABLE_REASONS else "lost"
            return Unavailable(reason)
        except OSError:
            return Unavailable("store_unavailable")
        if len(body) > limit:
            return Unavailable("truncated")
        self.decoded_bytes += len(body)
        if self.decoded_bytes > self._budgets.max_decoded_bytes:
            self._exhaust(
                f"the query decoded more than {self._budgets.max_decoded_bytes} bytes of values",
                "narrow the query so it reads fewer values, or raise max_decoded_bytes",
            )
        shared = self._decoded.get(handle.cid) if self._decoded is not None else None
        if shared is not None:
            return shared
        try:
            value = decode_value(body)
        except ValueTooDeep:
            return Unavailable("truncated")
        except ValueCorrupt:
            return Unavailable("corrupt")
        if self._decoded is not None:
            self._decoded.put(handle.cid, value, len(body))
        return value

    def _exhaust(self, message: str, remedy: str, evaluating: bool = True) -> None:
        if self.exhausted is None:
            self.exhausted = BudgetExceeded(message, remedy)
            if evaluating:
                self.evaluations.count_unavailable("query_budget_exhausted")
        raise self.exhausted
