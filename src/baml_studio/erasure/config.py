"""Configuration of erasure, read once where the manager is opened."""

from __future__ import annotations

from dataclasses import dataclass

from baml_studio.projector.evidence import DEFAULT_MAX_OBJECT_BYTES


@dataclass(frozen=True, slots=True)
class ErasureConfig:
    retry_initial_s: float = 1.0
    """Wait before the first retry of a step that failed transiently; doubles per attempt."""

    retry_max_s: float = 300.0
    """Longest wait between two attempts of a step (the erasure never gives up on a transient
    failure: it stays ``running`` and says why in the log)."""

    settle_s: float = 30.0
    """Wait between the Lance step and the verification pass, so that a projector that read an
    erased object just before step 1 has finished writing what the pass then removes."""

    max_selector_items: int = 10_000
    """Most ``process_euids`` or ``execution_ids`` one request may name."""

    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES
    """Largest evidence object read while planning (the contract's ``max_object_bytes``)."""

    refs_cache: bool = True
    """Keep each evidence object's references (CIDs, root ids) in ``refs.sqlite`` beside the
    erasures file, so the reference count reads only objects it has not seen (docs/erasure.md)."""

    def __post_init__(self) -> None:
        if self.retry_initial_s <= 0 or self.retry_max_s < self.retry_initial_s:
            raise ValueError("ErasureConfig needs 0 < retry_initial_s <= retry_max_s")
        if self.settle_s < 0:
            raise ValueError("ErasureConfig.settle_s must be >= 0")
        if self.max_selector_items < 1 or self.max_object_bytes < 1:
            raise ValueError("ErasureConfig limits must be at least 1")
