"""The in-process profiler: records every BAML call into the local profiles-v1 store.

Usage::

    from baml_studio import profiler

    @profiler.baml_function(name="app.ExtractInvoice", llm=True)
    def extract_invoice(document: str) -> dict: ...

    profiler.start()          # BAML_PROFILE=0 turns it off; BAML_PROFILE_DIR picks the store
    extract_invoice("...")
    profiler.stop()           # flush and close

See ``docs/architecture.md`` for the hot path / consumer split.
"""

from baml_studio.profiler.api import (
    active,
    baml_function,
    capture,
    propagate,
    start,
    stop,
)
from baml_studio.profiler.config import ProfilerConfig
from baml_studio.profiler.profiler import Profiler
from baml_studio.profiler.registry import REGISTRY, FunctionRegistry
from baml_studio.profiler.runtime import ProfilerStats

__all__ = [
    "REGISTRY",
    "FunctionRegistry",
    "Profiler",
    "ProfilerConfig",
    "ProfilerStats",
    "active",
    "baml_function",
    "capture",
    "propagate",
    "start",
    "stop",
]
