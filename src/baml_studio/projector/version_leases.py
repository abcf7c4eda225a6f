"""Leases on the Lance versions running queries read (docs/projector.md "Version retention").

A query binds one version of each private dataset when it starts
(:mod:`baml_studio.coordinator.snapshot`) and reads those versions until it ends. Compaction
(:meth:`~.lance_store.PrivateStore.compact`) removes versions older than its retention window,
and a bound version can be older than that window: a dataset left alone for eight days still
has its eight-day-old newest version, a query binds it, the projector commits a new one, and
the next compaction would remove the version the query is reading. So the coordinator writes a
*lease* before it reads, and compaction keeps every version a live lease names.

Layout, next to the datasets of one scope: one file per *holder* (a :class:`VersionLeases`,
one per coordinator process and scope, named by a random id), holding that process's live
leases::

    <root>/_leases/<holder>.json
    {"format": "baml-studio.version-leases/1",
     "leases": [{"versions": {"calls_v1": 12, "projected_v1": 30, ...},
                 "expires_at": 1733390000.5}, ...]}

A query's lease is written before it reads anything. Queries of one process that bind the same
versions share one entry, extended (the file rewritten) only when a query needs it beyond its
current expiry; an entry is written with :data:`EXTEND_S` to spare, so a stream of short
queries over the same versions writes about once a minute, and a new set of versions (the
projector committed meanwhile) writes once. Every write drops the holder's expired entries, so
a file holds what its process's running queries need, and the directory one file per process
(two processes never write one file). Entries are never released early (they are shared);
they expire. A local file is written to a temporary name and renamed (readers never see half a
file); an object-store ``PUT`` is atomic.

Compaction reads the leases with :meth:`VersionLeases.floor`: the lowest version each dataset's
live leases name. It then keeps that version and every later one, by number
(:func:`removable`: the versions to remove are named to Lance, not found by a time cut-off, so
no clock race can take a leased one, and a leased version already gone still protects the
later ones). A query reads the newest versions and then
writes its lease; so that compaction cannot slip between the two, a version is also kept for a
grace period after it stopped being the newest (``PrivateStore.compact``'s
``superseded_grace``). Compaction counts a lease live until :data:`SKEW_S` past its expiry
(the hosts' clocks may disagree); a file whose every entry stopped counting :data:`GRACE_S`
ago (its process ended) is deleted, and a holder whose entries have all expired writes its
next lease to a new file, so a deletion never takes a live lease. A file that cannot be
decoded (:func:`decode_leases` raises :class:`LeaseMalformed`) protects nothing, is reported
and counted, and is left in place for an operator; the others still count.

Errors: :class:`LeaseMalformed` (a lease body, terminal for that file) and
:class:`LeaseUnavailable` (the lease could not be written or listed; transient): a query whose
lease cannot be written is refused rather than run unprotected.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from baml_studio.jsontext import parse_json
from baml_studio.projector.errors import ProjectorError

log = logging.getLogger(__name__)

FORMAT = "baml-studio.version-leases/1"
LEASE_DIR = "_leases"
EXTEND_S = 60.0
"""A written lease lasts this much longer than the query that wrote it needed."""
MIN_SPARE_S = 15.0
"""A query sharing an entry gets at least this much beyond its own wall budget (else the
entry is extended)."""
SKEW_S = 300.0
"""Compaction counts a lease live until this long after its ``expires_at``: the coordinator's
and the compacting host's clocks may disagree by up to this much."""
GRACE_S = 300.0
"""A file whose entries all stopped counting is deleted this long after."""
MAX_FILE_BYTES = 4 << 20
MAX_LEASES = 4096
"""Live entries one holder may keep (a query over yet another set of versions past this is
refused with :class:`LeaseUnavailable`)."""
MAX_DATASETS = 64


class LeaseMalformed(ProjectorError):
    """A lease file's body is not a holder's version leases."""

    transient = False


class LeaseUnavailable(ProjectorError):
    """A lease could not be written, listed or read (I/O)."""

    transient = True


@dataclass(frozen=True, slots=True)
class Lease:
    versions: dict[str, int]
    expires_at: float
    """Unix seconds."""

    def as_json(self) -> dict[str, Any]:
        return {"versions": self.versions, "expires_at": self.expires_at}


def encode_leases(leases: Iterable[Lease]) -> bytes:
    """A holder's file: ``leases`` in the layout of the module docstring."""
    body = {"format": FORMAT, "leases": [lease.as_json() for lease in leases]}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class LeaseFloor:
    """What compaction learned from the leases of one scope."""

    versions: dict[str, int]
    """Per dataset, the lowest version a live lease names (absent: no live lease)."""
    live: int = 0
    """Live entries, over every holder."""
    expired_removed: int = 0
    """Files deleted because every entry in them had been expired for :data:`GRACE_S`."""
    malformed: tuple[str, ...] = ()
    """Paths of lease files that could not be decoded (left in place)."""


def decode_leases(data: bytes) -> list[Lease]:
    """The leases of a holder's file; raises :class:`LeaseMalformed` for anything else."""
    if len(data) > MAX_FILE_BYTES:
        raise LeaseMalformed(f"lease file is {len(data)} bytes, more than {MAX_FILE_BYTES}")
    body = parse_json(data, lambda reason: LeaseMalformed(f"lease file is not JSON: {reason}"))
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise LeaseMalformed(f"lease file is not a {FORMAT} object")
    entries = body.get("leases")
    if not isinstance(entries, list) or len(entries) > MAX_LEASES:
        raise LeaseMalformed(f"'leases' must be a list of at most {MAX_LEASES} leases")
    return [_lease(entry) for entry in entries]


def _lease(entry: object) -> Lease:
    if not isinstance(entry, dict):
        raise LeaseMalformed("a lease must be an object with versions and expires_at")
    versions, expires_at = entry.get("versions"), entry.get("expires_at")
    if not isinstance(versions, dict) or not 0 < len(versions) <= MAX_DATASETS:
        raise LeaseMalformed(f"lease versions must be an object of 1..{MAX_DATASETS} datasets")
    for name, version in versions.items():
        if not name or type(version) is not int or version < 1:
            raise LeaseMalformed(f"lease version of {name!r} must be an integer >= 1")
    if not isinstance(expires_at, int | float) or isinstance(expires_at, bool):
        raise LeaseMalformed("lease expires_at must be a finite number")
    if not math.isfinite(expires_at):
        raise LeaseMalformed("lease expires_at must be a finite number")
    return Lease(dict(versions), float(expires_at))


def filesystem(
    root_uri: str, storage_options: Mapping[str, str] | None
) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path of ``root_uri`` in it (a local path or ``s3://``),
    from the same options Lance takes (``aws_endpoint``, ``aws_region``, keys)."""
    if "://" not in root_uri or root_uri.startswith("file://"):
        return pafs.LocalFileSystem(), root_uri.removeprefix("file://")
    if not root_uri.startswith("s3://"):
        raise ValueError(f"version leases support local and s3:// roots, not {root_uri!r}")
    options = dict(storage_options or {})
    endpoint = options.get("aws_endpoint")
    kwargs: dict[str, Any] = {}
    if options.get("aws_region"):  # else the SDK's own chain (AWS_REGION, the profile)
        kwargs["region"] = options["aws_region"]
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs["endpoint_override"] = host or scheme
        kwargs["scheme"] = scheme if host else "https"
    if options.get("aws_access_key_id"):
        kwargs["access_key"] = options["aws_access_key_id"]
        kwargs["secret_key"] = options.get("aws_secret_access_key", "")
    if options.get("aws_virtual_hosted_style_request") == "true":
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs), root_uri.removeprefix("s3://")


class VersionLeases:
    """The leases of one scope's datasets at ``root_uri`` (module docstring)."""

    def __init__(
        self,
        root_uri: str,
        *,
        storage_options: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fs, root = filesystem(root_uri, storage_options)
        self._local = isinstance(self._fs, pafs.LocalFileSystem)
        self._dir = f"{root.rstrip('/')}/{LEASE_DIR}"
        self._clock = clock
        self._path = self._new_path()
        self._lock = threading.Lock()
        self._held: dict[tuple[tuple[str, int], ...], Lease] = {}
        """This holder's live entries by their (sorted) versions."""
        self.writes = 0
        """Lease files written by this holder (instrumentation)."""

    def _new_path(self) -> str:
        return f"{self._dir}/{secrets.token_hex(8)}.json"

    @property
    def path(self) -> str:
        """This holder's file (in the filesystem's terms: a local path, or bucket/key)."""
        return self._path

    def hold(self, versions: Mapping[str, int], seconds: float) -> None:
        """Keep ``versions`` from compaction for at least ``seconds`` from now."""
        pinned = {name: v for name, v in sorted(versions.items()) if v >= 1}
        if not pinned:
            return
        now = self._clock()
        until = now + max(seconds, 0.0)
        key = tuple(pinned.items())
        with self._lock:
            held = self._held.get(key)
            if held is not None and held.expires_at >= until + MIN_SPARE_S:
                return
            live = {k: lease for k, lease in self._held.items() if lease.expires_at >= now}
            if not live:
                # a file whose entries all expired may be deleted by a compaction at any
                # moment (after SKEW_S + GRACE_S): never write a live lease into it again
                self._path = self._new_path()
            live[key] = Lease(pinned, until + EXTEND_S)
            if len(live) > MAX_LEASES:
                raise LeaseUnavailable(
                    f"{len(live) - 1} leases are live in this process, the most it keeps"
                )
            self._write(self._path, encode_leases(live.values()))
            self._held = live
            self.writes += 1

    def floor(self, *, now: float | None = None, remove_expired: bool = True) -> LeaseFloor:
        """The lowest leased version of each dataset over every live lease (any holder) at
        ``now`` (Unix seconds; default the clock)."""
        now = self._clock() if now is None else now
        lowest: dict[str, int] = {}
        live = removed = 0
        malformed: list[str] = []
        for info in self._list():
            try:
                leases = decode_leases(self._read(info.path))
            except LeaseMalformed as exc:
                log.warning("version leases %s ignored: %s", info.path, exc)
                malformed.append(info.path)
                continue
            except FileNotFoundError:  # deleted by another compaction meanwhile
                continue
            current = [lease for lease in leases if lease.expires_at + SKEW_S >= now]
            if not current:
                latest = max((lease.expires_at for lease in leases), default=0.0)
                if remove_expired and latest + SKEW_S + GRACE_S < now:
                    self._delete(info.path)
                    removed += 1
                continue
            live += len(current)
            for lease in current:
                for name, version in lease.versions.items():
                    lowest[name] = min(version, lowest.get(name, version))
        return LeaseFloor(lowest, live, removed, tuple(malformed))

    # --- I/O ------------------------------------------------------------------------------

    def _write(self, path: str, data: bytes) -> None:
        try:
            if self._local:
                os.makedirs(self._dir, exist_ok=True)
                staging = f"{self._dir}/.{secrets.token_hex(8)}.tmp"
                with open(staging, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(staging, path)
            else:
                with self._fs.open_output_stream(path) as out:
                    out.write(data)
        except OSError as exc:
            raise LeaseUnavailable(f"cannot write version lease {path}: {exc}") from exc

    def _list(self) -> list[pafs.FileInfo]:
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self._dir, allow_not_found=True))
        except OSError as exc:
            raise LeaseUnavailable(f"cannot list version leases in {self._dir}: {exc}") from exc
        return [i for i in infos if i.type == pafs.FileType.File and i.path.endswith(".json")]

    def _read(self, path: str) -> bytes:
        try:
            with self._fs.open_input_stream(path) as stream:
                return bytes(stream.read(MAX_FILE_BYTES + 1))
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise LeaseUnavailable(f"cannot read version lease {path}: {exc}") from exc

    def _delete(self, path: str) -> None:
        try:
            self._fs.delete_file(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise LeaseUnavailable(f"cannot delete version lease {path}: {exc}") from exc


def dataset_versions(ds: Any) -> list[Mapping[str, Any]]:
    """``ds``'s versions with exact commit times where Lance gives them: its native list
    carries nanoseconds since the epoch. The public ``LanceDataset.versions()`` turns those
    into naive local datetimes plus a ``timedelta``, which drops the ``fold``: in the hour
    that repeats when daylight saving time ends, a commit would read an hour older than it
    is. Falls back to the public list when the native one is not there or not numeric."""
    native = getattr(ds, "_ds", None)
    try:
        entries = native.versions() if native is not None else None
    except Exception:  # a Lance without the native list: the public one below
        entries = None
    if entries and all(isinstance(e.get("timestamp"), int) for e in entries):
        return list(entries)
    return list(ds.versions())


def version_stamps(versions: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """``{version: commit time in Unix seconds}`` of :func:`dataset_versions`: nanoseconds
    since the epoch exactly; a naive local datetime (the public list) as ``timestamp()``
    reads it."""
    stamps: dict[int, float] = {}
    for entry in versions:
        stamp: Any = entry.get("timestamp")
        if isinstance(stamp, int) and not isinstance(stamp, bool):
            stamps[int(entry["version"])] = stamp / 1e9
        elif hasattr(stamp, "timestamp"):
            stamps[int(entry["version"])] = stamp.timestamp()
    return stamps


def removable(
    stamps: Mapping[int, float], *, before: float, leased: int | None, settled: float
) -> list[int]:
    """The versions compaction may remove, of ``stamps`` (:func:`version_stamps`): committed
    before ``before`` (the retention's cut-off), older than ``leased`` (the lowest version a
    live lease names) and older than the version that was the newest at ``settled`` (the
    superseded grace); never the newest. Decided by version number, so a version that is kept
    keeps every later one."""
    if not stamps:
        return []
    committed = [v for v, t in stamps.items() if t <= settled]
    floor = max(committed) if committed else min(stamps)
    if leased is not None:
        floor = min(floor, leased)
    newest = max(stamps)
    return sorted(v for v, t in stamps.items() if t < before and v < floor and v != newest)
