"""Typed errors of the projector.

Exception tree::

    BamlStudioError
    └── ProjectorError                 any projector failure; ``transient`` says whether to retry
        ├── EvidenceMissing            an evidence object is absent from the bucket      terminal
        ├── EvidenceCorrupt            bad zstd frame, over the size cap, bad checksum,  terminal
        │                              decode error or unsupported version
        ├── EvidenceOutOfScope         a key outside the scope's evidence prefix         terminal
        ├── EvidenceUnavailable        the bucket could not be read (I/O, throttling,    transient
        │                              access) — retry the message
        ├── ValuesPending              values an execution references are not yet        transient
        │                              ingested: leave the message for a retry
        ├── ControlPlaneUnavailable    the control plane did not answer, or 5xx/429      transient
        ├── ControlPlaneRefused        the control plane refused a request (4xx)         terminal
        │   ├── ControlPlaneAuthRefused  the workload token (401) or its scope (403)     transient
        │   └── ControlPlaneNotFound     no such route or resource (404, 405): the URL    transient
        ├── InactiveGeneration         the generation written to is no longer active     transient
        └── LanceCommitFailed          a Lance write or commit failed                    transient

Retry policy is ``exc.transient`` (never the message text). ``EvidenceUnavailable`` is the one
addition to the list in ``docs/projector.md``: a bucket read that failed for a reason other
than absence must retry, not quarantine (``EvidenceCorrupt``) or skip (``EvidenceMissing``).
Every error can name the object key involved in ``key`` (the evidence errors always do,
``""`` means none); a format error behind ``EvidenceCorrupt`` is its ``__cause__``.
"""

from __future__ import annotations

from typing import ClassVar

from baml_studio.format.errors import BamlStudioError


class ProjectorError(BamlStudioError):
    """Any failure while projecting; ``transient`` errors may go away on retry."""

    transient: ClassVar[bool] = False

    def __init__(self, message: str, *, key: str = "") -> None:
        super().__init__(message)
        self.key = key
        """The object key involved (``""`` when none is)."""


class EvidenceMissing(ProjectorError):
    """No object under the key (never shipped, or erased)."""

    transient = False


class EvidenceCorrupt(ProjectorError):
    """The object is there but fails verification: not one zstd frame, over the size cap, a
    bad trailing checksum or CID, a decode error, the wrong stream or sequence, or an
    unsupported version. Re-reading gives the same answer: quarantine it."""

    transient = False


class EvidenceOutOfScope(ProjectorError):
    """A key, or a stream id or CID that would make one, outside the scope's evidence
    prefix."""

    transient = False


class EvidenceUnavailable(ProjectorError):
    """The bucket failed to answer (connection, timeout, throttling, OS error, access)."""

    transient = True


class ValuesPending(ProjectorError):
    """An execution references values not yet in ``values_v1`` nor under ``cas/values/``."""

    transient = True


class ControlPlaneUnavailable(ProjectorError):
    """The control plane could not be reached, timed out, or answered 5xx or 429."""

    transient = True

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status, if one arrived."""


class ControlPlaneRefused(ProjectorError):
    """The control plane refused the request (a 4xx other than 429): retrying the same
    request gets the same answer."""

    transient = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status."""
        self.code = code
        """The ``ErrorResponse`` code, if the body carried one."""


class ControlPlaneAuthRefused(ControlPlaneRefused):
    """The control plane refused the workload token (401: expired, revoked or unknown) or the
    scope it was used for (403: the deployment does not serve it). The request itself may be
    sound: the same one succeeds once the token is rotated or the deployment assigned, so a
    message that met this is retried (and, past the queue's receive limit, dead-lettered by
    the queue), never quarantined as if its evidence were bad."""

    transient = True


class ControlPlaneNotFound(ControlPlaneRefused):
    """The control plane has no such route or resource (404, 405): a ``--control-plane`` URL
    with a wrong path, a proxy in front of something else, or a control plane without the
    catalog version asked for. Configuration, never the evidence: a message that met this is
    retried (and, past the queue's receive limit, dead-lettered by the queue, to be replayed
    once the URL is fixed), never quarantined."""

    transient = True


class InactiveGeneration(ProjectorError):
    """The projection generation written to is no longer the active one; fetch the active
    generation and write again."""

    transient = True

    def __init__(self, message: str, *, active_generation: str | None = None) -> None:
        super().__init__(message)
        self.active_generation = active_generation
        """The active generation, when the control plane named it."""


class LanceCommitFailed(ProjectorError):
    """Writing private rows or committing a Lance dataset version failed."""

    transient = True
