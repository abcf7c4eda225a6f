"""The ``ErasureRequest`` body: parsed, checked and put in one canonical form.

A request names exactly one selector (openapi.yaml ``ErasureRequest``)::

    {"process_euids": ["<32 hex>", …]}                  whole streams
    {"execution_ids": ["<root id>", …]}                 the streams holding these executions
    {"time_range": {"start": "<RFC 3339>", "end": "…"}} streams with an execution that starts or
                                                         ends in [start, end)

Checked beyond the generated model: exactly one selector (``minProperties``/``maxProperties``
1; ``null`` counts as absent), no repeated item (``uniqueItems``), at most
``max_items`` items, ``start`` before ``end``. The canonical form sorts the lists and writes
times in UTC (``…Z``, microseconds); two requests select the same thing exactly when their
canonical forms are equal, which is what the ``Idempotency-Key`` check compares.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError

from baml_studio.apierrors import BadRequest
from baml_studio.erasure.models import ErasureRequest

SelectorKind = Literal["process_euids", "execution_ids", "time_range"]
KINDS: tuple[SelectorKind, ...] = ("process_euids", "execution_ids", "time_range")


@dataclass(frozen=True, slots=True)
class Selector:
    """One checked selector."""

    kind: SelectorKind
    items: tuple[str, ...] = ()
    """The sorted euids or execution ids (empty for a time range)."""
    start: datetime | None = None
    """Inclusive start of a time range (UTC)."""
    end: datetime | None = None
    """Exclusive end of a time range (UTC)."""

    def to_json(self) -> dict[str, Any]:
        """The canonical ``ErasureRequest``."""
        if self.kind == "time_range":
            assert self.start is not None and self.end is not None  # reason: built by parse
            return {"time_range": {"start": rfc3339(self.start), "end": rfc3339(self.end)}}
        return {self.kind: list(self.items)}

    def canonical(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))


def rfc3339(t: datetime) -> str:
    """``t`` in UTC with microseconds and ``Z``."""
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_selector(body: bytes, *, max_items: int) -> Selector:
    """The selector of a request body, or 400 naming what is wrong."""
    try:
        request = ErasureRequest.model_validate_json(body, strict=True)
    except ValidationError as exc:
        problems = [
            {"field": ".".join(str(p) for p in e["loc"]) or "(body)", "problem": e["msg"]}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise BadRequest(
            "the body is not an ErasureRequest: send exactly one of process_euids (32 lowercase "
            'hex each), execution_ids or time_range {"start", "end"} (RFC 3339 with offset)',
            code="invalid_selector",
            details={"errors": problems[:20]},
        ) from None
    given = [kind for kind in KINDS if getattr(request, kind) is not None]
    if len(given) != 1:
        raise BadRequest(
            f"an ErasureRequest names exactly one selector; this one names {given or 'none'} "
            f"(choose one of {list(KINDS)})",
            code="invalid_selector",
            details={"selectors": given},
        )
    kind = given[0]
    if kind == "time_range":
        assert request.time_range is not None  # reason: checked just above
        start, end = request.time_range.start, request.time_range.end
        if not start < end:
            raise BadRequest(
                f"time_range.start {rfc3339(start)} must be before time_range.end {rfc3339(end)}",
                code="invalid_time_range",
            )
        return Selector("time_range", start=start.astimezone(UTC), end=end.astimezone(UTC))
    raw = getattr(request, kind)
    items = [item.root for item in raw]
    return Selector(kind, _unique(kind, items, max_items))


def selector_from_json(raw: Mapping[str, Any]) -> Selector:
    """A stored canonical selector back (the store's own JSON; trusted)."""
    return parse_selector(json.dumps(dict(raw)).encode(), max_items=1 << 62)


def _unique(kind: str, items: list[str], max_items: int) -> tuple[str, ...]:
    if len(items) > max_items:
        raise BadRequest(
            f"{kind} lists {len(items)} items; one erasure takes at most {max_items} "
            "(split the request)",
            code="too_many_selector_items",
            details={"limit": max_items},
        )
    unique = sorted(set(items))
    if len(unique) != len(items):
        repeated = sorted(i for i, n in Counter(items).items() if n > 1)
        raise BadRequest(
            f"{kind} repeats {repeated[:5]}; list each item once",
            code="duplicate_selector_item",
            details={"repeated": repeated[:20]},
        )
    return tuple(unique)
