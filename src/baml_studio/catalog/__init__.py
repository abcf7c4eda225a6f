"""Catalog v1: the relations of ``baml-studio query`` and the fold that produces them.

* :mod:`.schema`: every relation and column (types, keys, public/private), the one source of
  truth; :mod:`.split` derives the public/private halves from it.
* :mod:`.load`: the store's I/O (listings, the meta-plane index, data groups, inventories).
* :mod:`.fold`: one execution's inputs to its rows, pure (:func:`fold_execution`).
* :mod:`.local`: :class:`LocalStoreSource`, the :class:`~.source.CatalogSource` of a local
  store, with its fold cache.
"""

from baml_studio.catalog.fold import EXECUTION_RELATIONS, fold_execution, fold_rows
from baml_studio.catalog.fold_cache import DEFAULT_MAX_FOLD_BYTES, FoldCache, FoldKey
from baml_studio.catalog.fold_inputs import (
    CorruptDataSegment,
    DataIssue,
    DataRead,
    ExecutionInputs,
    ExecutionMeta,
    GroupCountMismatch,
    MissingDataSegment,
    NoRootEnded,
    ProcessInfo,
    UnresolvedDependency,
)
from baml_studio.catalog.fold_meta import META_ROOT_COLUMNS
from baml_studio.catalog.local import (
    CatalogError,
    LocalStoreSource,
    UnknownRelation,
    snapshot_generation,
)
from baml_studio.catalog.source import CatalogSource, Snapshot, ValueUnavailable
from baml_studio.catalog.split import (
    CLASSIFICATION,
    ColumnClass,
    join_split,
    private_schema,
    public_schema,
    split_table,
)

__all__ = [
    "CLASSIFICATION",
    "DEFAULT_MAX_FOLD_BYTES",
    "EXECUTION_RELATIONS",
    "META_ROOT_COLUMNS",
    "CatalogError",
    "CatalogSource",
    "ColumnClass",
    "CorruptDataSegment",
    "DataIssue",
    "DataRead",
    "ExecutionInputs",
    "ExecutionMeta",
    "FoldCache",
    "FoldKey",
    "GroupCountMismatch",
    "LocalStoreSource",
    "MissingDataSegment",
    "NoRootEnded",
    "ProcessInfo",
    "Snapshot",
    "UnknownRelation",
    "UnresolvedDependency",
    "ValueUnavailable",
    "fold_execution",
    "fold_rows",
    "join_split",
    "private_schema",
    "public_schema",
    "snapshot_generation",
    "split_table",
]
