"""The registered projection schemas: the public column set of the six public relations.

Derived from the split table (:mod:`baml_studio.catalog.split`), so the schema served by
``GET /projection-schemas/{catalog_version}``, the check of every projection batch and the
fact-store tables cannot drift apart. ``schema_digest`` fingerprints the set; the metastore
registers it once per catalog version and refuses a different set under the same version.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

import pyarrow as pa

from baml_studio.catalog.schema import CATALOG_VERSION, RELATIONS, Relation
from baml_studio.catalog.split import key_columns, public_schema

SCHEMA_VERSION = "1"

PUBLIC_RELATIONS: tuple[Relation, ...] = tuple(r for r in RELATIONS if not r.internal)
PUBLIC_RELATION_NAMES: frozenset[str] = frozenset(r.name for r in PUBLIC_RELATIONS)
CATALOG_VERSIONS: tuple[str, ...] = (CATALOG_VERSION,)
"""Catalog versions this build registers and accepts."""


def batch_id(root_id: str, relation: str, partition: int) -> str:
    """The batch id of one execution's rows of one relation and partition (openapi.yaml's
    ``BatchId``: "derived from the execution's root ID, relation and partition"): what the
    projector sends and what ``PUT /projection-batches/{batch_id}`` checks the path against."""
    return f"{root_id}.{relation}.{partition}"


def arrow_type_name(type_: pa.DataType) -> str:
    """The Arrow data type name served in ``RelationColumn.type`` (``utf8``, ``uint64``,
    ``timestamp[ns, tz=UTC]``, ``list<utf8>``, …)."""
    if pa.types.is_string(type_):
        return "utf8"
    if pa.types.is_large_string(type_):
        return "large_utf8"
    if pa.types.is_list(type_):
        return f"list<{arrow_type_name(type_.value_type)}>"
    return str(type_)


def relation(name: str) -> Relation:
    """The public relation ``name``; ``KeyError`` for an internal or unknown one."""
    for candidate in PUBLIC_RELATIONS:
        if candidate.name == name:
            return candidate
    raise KeyError(name)


@cache
def registered_schema(name: str) -> pa.Schema:
    """The exact Arrow schema a batch of relation ``name`` must carry (no field metadata).
    Cached (schemas are immutable): both sides of every batch ask for it."""
    fields = [pa.field(f.name, f.type, nullable=f.nullable) for f in public_schema(relation(name))]
    return pa.schema(fields)


def schema_set(catalog_version: str) -> dict[str, Any]:
    """The ``ProjectionSchemaSet`` JSON for ``catalog_version`` (in :data:`CATALOG_VERSIONS`)."""
    if catalog_version not in CATALOG_VERSIONS:
        raise KeyError(catalog_version)
    return {
        "catalog_version": catalog_version,
        "relations": [
            {
                "relation": r.name,
                "schema_version": SCHEMA_VERSION,
                "columns": [
                    {"name": f.name, "type": arrow_type_name(f.type), "nullable": f.nullable}
                    for f in registered_schema(r.name)
                ],
                "partition_columns": key_columns(r),
            }
            for r in PUBLIC_RELATIONS
        ],
    }


def schema_digest(catalog_version: str) -> str:
    """``sha256:`` of the canonical JSON of :func:`schema_set`."""
    canonical = json.dumps(schema_set(catalog_version), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
