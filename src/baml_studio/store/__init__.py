"""The local profiles-v1 store: atomic publication, locks, usage ledger, disk budget, reader.

Layout and lock order are in :mod:`baml_studio.store.layout` and
:mod:`baml_studio.store.locks`; the on-disk contract is documented in ``docs/formats.md``
(sections "Store layout" and "Usage ledger (BAMLUSE1)").
"""

from baml_studio.store.clean import clean_profiles_v1
from baml_studio.store.config import PROFILE_DIR_ENV, DiskBudget, resolve_store_root
from baml_studio.store.errors import (
    CasPathMismatch,
    CorruptHighWater,
    InvalidStoreRoot,
    SequenceMismatch,
    StoreClosed,
    StoreError,
    StoreFailureReason,
    StoreInUse,
    StoreIoError,
    StoreNotFound,
    StoreOpenError,
    StreamInUse,
    UsageScanError,
)
from baml_studio.store.fsops import FileSystem, OsFileSystem
from baml_studio.store.layout import Plane, StoreLayout
from baml_studio.store.reader import StoreReader
from baml_studio.store.results import (
    GATE_DISK,
    GATE_OPEN,
    GATE_UNAVAILABLE,
    AdmissionGate,
    Blocked,
    CasResult,
    Committed,
    Conflict,
    Indeterminate,
    IndeterminateToken,
    Lost,
    PublicationKind,
    Published,
    PublishResult,
    Reused,
    StreamHighWater,
)
from baml_studio.store.scan import (
    CasCheck,
    ExecutionReport,
    StoreCorruption,
    StoreScan,
    StreamReport,
)
from baml_studio.store.usage import (
    USAGE_STATE_BYTES,
    decode_usage_state,
    encode_usage_state,
    scan_physical_usage,
)
from baml_studio.store.writer import StoreWriter, StreamStore

__all__ = [
    "GATE_DISK",
    "GATE_OPEN",
    "GATE_UNAVAILABLE",
    "PROFILE_DIR_ENV",
    "USAGE_STATE_BYTES",
    "AdmissionGate",
    "Blocked",
    "CasCheck",
    "CasPathMismatch",
    "CasResult",
    "Committed",
    "Conflict",
    "CorruptHighWater",
    "DiskBudget",
    "ExecutionReport",
    "FileSystem",
    "Indeterminate",
    "IndeterminateToken",
    "InvalidStoreRoot",
    "Lost",
    "OsFileSystem",
    "Plane",
    "PublicationKind",
    "PublishResult",
    "Published",
    "Reused",
    "SequenceMismatch",
    "StoreClosed",
    "StoreCorruption",
    "StoreError",
    "StoreFailureReason",
    "StoreInUse",
    "StoreIoError",
    "StoreLayout",
    "StoreNotFound",
    "StoreOpenError",
    "StoreReader",
    "StoreScan",
    "StoreWriter",
    "StreamHighWater",
    "StreamInUse",
    "StreamReport",
    "StreamStore",
    "UsageScanError",
    "clean_profiles_v1",
    "decode_usage_state",
    "encode_usage_state",
    "resolve_store_root",
    "scan_physical_usage",
]
