"""Typed errors of erasure.

HTTP refusals are :class:`~baml_studio.apierrors.ApiError`\\ s (one ``ErrorResponse`` each)::

    ApiError
    ├── BadRequest              400 invalid_selector, duplicate_selector_item, invalid_time_range,
    │                               too_many_selector_items, unknown_stream, unknown_execution,
    │                               missing_idempotency_key, invalid_idempotency_key,
    │                               invalid_environment_header
    ├── Forbidden               403 permission_denied, scope_mismatch (coordinator/auth.py),
    │                               scope_not_served
    ├── NotFound                404 erasure_not_found (also another scope's erasure)
    ├── Conflict                409 idempotency_key_reused
    ├── ErasureStoreError       500 erasure_store_error: a file this version cannot read
    └── DependencyUnavailable   503 erasure_store_unavailable, control_plane_unavailable,
                                    object_store_unavailable, erasure_closing

Inside the worker, a step's failure is classified by :func:`is_transient` (``isinstance`` and the
``transient`` flag of the project's error trees, never message text): transient failures (the
bucket, the control plane or Lance did not answer, or the control plane refused the data plane's
workload token or its scope: ``ControlPlaneAuthRefused``, which a rotated token or an assigned
deployment ends) are retried with backoff and the erasure stays ``running``; anything else ends
it ``failed`` with the error in the ``Erasure``::

    BamlStudioError
    └── ErasureError            .transient
        └── ErasureStopped      transient: close() stopped the worker; the step resumes at the
                                next start
"""

from __future__ import annotations

from typing import ClassVar

from baml_studio.apierrors import ApiError, DependencyUnavailable
from baml_studio.format.errors import BamlStudioError


class ErasureError(BamlStudioError):
    """A failure of one erasure step; ``transient`` ones are retried."""

    transient: ClassVar[bool] = False


class ErasureStopped(ErasureError):
    """The manager is closing; the erasure keeps its recorded step and resumes at restart."""

    transient = True


class ErasureStoreError(ApiError):
    """The erasures file cannot be used by this version (terminal)."""

    code = "erasure_store_error"


class ErasureStoreUnavailable(DependencyUnavailable):
    """SQLite was locked or failed with an I/O error (transient)."""

    code = "erasure_store_unavailable"


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the step may succeed: the ``transient`` flag of the project's error
    trees (object store, projector, erasure), 429/503 API errors, and plain OS errors."""
    if isinstance(exc, ApiError):
        return exc.retryable
    if isinstance(exc, BamlStudioError):
        return bool(getattr(exc, "transient", False))
    return isinstance(exc, OSError)
