"""The port between a catalog's data and the query engine.

A :class:`CatalogSource` serves folded catalog v1 tables and value bodies. The local store
(:class:`baml_studio.catalog.local.LocalStoreSource`) is one; the coordinator's mix of ClickHouse
facts and Lance rows will be another. The engine never touches files itself.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from baml_studio.format.errors import BamlStudioError


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a query's answer is consistent with (``QueryOutcome.snapshot``)."""

    catalog_version: str
    generation: str
    """Hex SHA-256 over "baml-query-generation-v1" and the sorted (stream, meta hw, data hw)."""
    projected_through: int
    """The highest committed data sequence the answer covers."""


class ValueUnavailable(BamlStudioError):
    """A value body could not be produced; ``reason`` is an UnavailableReason spelling
    (``lost``, ``corrupt``, ``truncated``, ``unsupported``, ``store_unavailable`` …)."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason


class CatalogSource(Protocol):
    def snapshot(self) -> Snapshot:
        """The snapshot this source answers from (stable for the source's lifetime)."""

    def execution_ids(self) -> list[str]:
        """Every listed execution id (wire form), sorted."""

    def tables(
        self, relations: Collection[str], execution_ids: Collection[str] | None
    ) -> dict[str, pa.Table]:
        """Folded tables (by versioned relation name, e.g. ``calls_v1``) restricted to
        ``execution_ids`` when given (None means all). Execution-independent relations
        (function_definitions, processes, store_files, value_index) ignore the restriction.
        Every table has exactly the schema of :mod:`baml_studio.catalog.schema`."""

    def read_value(self, codec: int, cid: bytes, max_bytes: int) -> bytes:
        """The encoded body of a value. Raises :class:`ValueUnavailable` (``lost`` when the
        object is missing, ``corrupt`` when it fails verification, ``truncated`` when it is
        larger than ``max_bytes``, ``unsupported`` for a codec other than 1,
        ``store_unavailable`` for other I/O errors)."""
