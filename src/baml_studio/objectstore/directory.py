"""The directory bucket: the embedded object store, one bucket as a directory tree on local disk.

Layout under ``<root>/<bucket>/`` (see ``docs/formats.md``, "Directory bucket")::

    objects/<key>   the object's bytes, exactly as uploaded
    meta/<key>      JSON sidecar {"version_id", "size", "sha256", "etag"}
    tmp/            staging files (same filesystem, so renames are atomic)
    locks/NN.lock   flock per key stripe (``NN`` = first byte of the key's SHA-256, 64 stripes)
    bucket.lock     flock: shared while puts commit and head/get look; exclusive for deletes and
                    for the rare put that must clear leftovers in its path

A put hashes the bytes, stages data and sidecar in ``tmp/``, then, holding the bucket lock shared
and its key's stripe lock exclusively, checks that the key is free, creates missing directories,
renames the sidecar into place, passes a durability barrier (the data, the sidecar and the new
directories), hard-links the staged data to ``objects/<key>`` (the commit point; ``link`` refuses an
existing name, so create-only holds even against writers outside the port) and passes a second
barrier (the link) before it answers. A barrier is one ``syncfs`` of the bucket's filesystem shared
by every put waiting at that moment (group commit, as the local store's ``publish_cas_batch``;
:class:`~baml_studio.objectstore.dirfs.GroupSync`), instead of four to six fsyncs per put. Puts of
different keys commit concurrently; two puts of one key are serialized by its stripe, and the second
gets ``ObjectAlreadyExists``. A put that meets something unusual in its path (an orphan directory or
sidecar, or a key nesting under another) retries under the exclusive bucket lock, where removing
leftovers cannot race another put. An object exists iff ``objects/<key>`` is a regular file; its
sidecar was always committed before it. Objects are create-only, so a key has one version at a time
and ``delete`` removes the file and its sidecar.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import json
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from baml_studio.jsontext import parse_json
from baml_studio.objectstore import dirfs
from baml_studio.objectstore.config import MAX_PRESIGN_SECONDS, DirectoryBucketConfig
from baml_studio.objectstore.errors import (
    ChecksumMismatch,
    InvalidArgument,
    InvalidObjectKey,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreCorrupt,
    ObjectStoreError,
    ObjectStoreUnavailable,
)
from baml_studio.objectstore.port import (
    ObjectInfo,
    PresignedPut,
    PutResult,
    validate_key,
    validate_range,
    validate_sha256,
)
from baml_studio.objectstore.presign import PresignSigner, SignedPut
from baml_studio.objectstore.presigned_http import HttpResponse, handle_presigned_put
from baml_studio.store.locks import FileLock

_DENIED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
LOCK_STRIPES = 64
"""Key stripes: puts of keys in different stripes never wait for each other."""
STALE_STAGING_SECONDS = 3600
"""Staging files older than this (left by a crashed put) are removed when a bucket opens."""


def _io_error(exc: OSError, key: str | None) -> ObjectStoreError:
    where = f" at {exc.filename}" if exc.filename else ""
    message = f"directory bucket I/O failed for key {key!r}{where}: {exc.strerror or exc}"
    if exc.errno in _DENIED:
        return ObjectStoreAccessDenied(
            message + "; check the data directory's permissions", key=key
        )
    return ObjectStoreUnavailable(message, key=key)


def new_version_id() -> str:
    """Sortable, unique: 20-digit nanosecond time and 32 random bits in hex."""
    return f"{time.time_ns():020d}{secrets.token_hex(4)}"


class DirectoryBucket:
    """The :class:`~baml_studio.objectstore.port.ObjectStore` on local disk.

    ``on_created`` is called with the new object's info after each successful put (direct or
    presigned), once the object is durable and the lock released; its exceptions propagate.
    """

    def __init__(
        self,
        config: DirectoryBucketConfig,
        *,
        clock: Callable[[], float] = time.time,
        on_created: Callable[[ObjectInfo], None] | None = None,
    ) -> None:
        self._bucket = config.bucket
        self._dir = config.root / config.bucket
        self._objects = self._dir / "objects"
        self._meta = self._dir / "meta"
        self._tmp = self._dir / "tmp"
        self._lock_path = self._dir / "bucket.lock"
        self._stripes = self._dir / "locks"
        self._signer = PresignSigner(config.signing_secret, config.presign_base_url, clock)
        self._barrier = dirfs.GroupSync(self._sync_filesystem)
        self._on_created = on_created
        try:
            for directory in (self._objects, self._meta, self._tmp, self._stripes):
                directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _io_error(exc, None) from exc
        dirfs.sweep_stale(self._tmp, time.time() - STALE_STAGING_SECONDS)

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def path(self) -> Path:
        """``<root>/<bucket>``."""
        return self._dir

    @contextmanager
    def _locked(self, *, exclusive: bool, key: str | None) -> Iterator[None]:
        try:
            lock = FileLock.acquire(self._lock_path, exclusive=exclusive)
        except OSError as exc:
            raise _io_error(exc, key) from exc
        with lock:
            yield

    @contextmanager
    def _key_locked(self, key: str) -> Iterator[None]:
        """The bucket lock shared, then the key's stripe lock exclusively."""
        stripe = hashlib.sha256(key.encode("utf-8")).digest()[0] % LOCK_STRIPES
        with self._locked(exclusive=False, key=key):
            try:
                lock = FileLock.acquire(self._stripes / f"{stripe:02d}.lock", exclusive=True)
            except OSError as exc:
                raise _io_error(exc, key) from exc
            with lock:
                yield

    def _sync_filesystem(self) -> None:
        dirfs.sync_filesystem(self._dir)

    def _object_path(self, key: str) -> Path:
        return self._objects.joinpath(*key.split("/"))

    def _meta_path(self, key: str) -> Path:
        return self._meta.joinpath(*key.split("/"))

    def put_if_absent(self, key: str, data: bytes, sha256: str) -> PutResult:
        validate_key(key)
        validate_sha256(sha256, key=key)
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise ChecksumMismatch(key, sha256, actual)
        if dirfs.is_regular(self._object_path(key)):
            raise ObjectAlreadyExists(key)  # cheap early answer; the locked check decides
        etag = hashlib.md5(data, usedforsecurity=False).hexdigest()
        info = ObjectInfo(key, len(data), sha256, new_version_id(), etag)
        sidecar = {"version_id": info.version_id, "size": info.size, "sha256": sha256, "etag": etag}
        meta_bytes = json.dumps(sidecar).encode("utf-8")
        try:
            data_tmp = dirfs.stage(self._tmp, data)  # made durable by the barrier before the link
            try:
                meta_tmp = dirfs.stage(self._tmp, meta_bytes)
                try:
                    with self._key_locked(key):
                        done = self._commit_fast(key, data_tmp, meta_tmp)
                    if not done:
                        with self._locked(exclusive=True, key=key):
                            self._commit(key, data_tmp, meta_tmp, meta_bytes)
                finally:
                    dirfs.discard(meta_tmp)
            finally:
                dirfs.discard(data_tmp)
        except OSError as exc:
            raise _io_error(exc, key) from exc
        if self._on_created is not None:
            self._on_created(info)
        return info

    def _commit_fast(self, key: str, data_tmp: Path, meta_tmp: Path) -> bool:
        """Under the key's stripe lock: refuse a taken key, then sidecar first, data last, each
        made durable by a shared barrier (see the module docstring).

        Removes nothing; False (no object committed) when the path holds anything but free names
        and directories, so the caller retries under the exclusive bucket lock."""
        target = self._object_path(key)
        found = dirfs.lstat_or_none(target)
        if found is not None:
            if stat.S_ISDIR(found.st_mode):
                return False
            raise ObjectAlreadyExists(key)
        segments = key.split("/")
        if not dirfs.make_dirs(self._objects, segments) or not dirfs.make_dirs(
            self._meta, segments
        ):
            return False
        meta_target = self._meta_path(key)
        found_meta = dirfs.lstat_or_none(meta_target)
        if found_meta is not None and not stat.S_ISREG(found_meta.st_mode):
            return False
        try:
            os.rename(meta_tmp, meta_target)
        except IsADirectoryError:
            return False  # a key below this one made the name a directory meanwhile
        self._barrier.sync()  # the data, the sidecar and every new directory
        try:
            os.link(data_tmp, target)
        except FileExistsError:
            if dirfs.is_regular(target):
                raise ObjectAlreadyExists(key) from None
            return False  # a key below this one made the name a directory meanwhile
        self._barrier.sync()  # the link
        return True

    def _commit(self, key: str, data_tmp: Path, meta_tmp: Path, meta_bytes: bytes) -> None:
        """Under the exclusive lock: refuse a taken key, clear leftovers, sidecar first, data
        last. ``meta_tmp`` may already have been renamed away by a fast attempt."""
        target = self._object_path(key)
        found = dirfs.lstat_or_none(target)
        if found is not None and stat.S_ISDIR(found.st_mode):
            if not dirfs.clear_orphan_dir(target):
                raise InvalidObjectKey(
                    f"key {key!r} is a prefix of existing objects ('{key}/...'); the directory "
                    "bucket cannot hold an object and objects below it",
                    key=key,
                )
        elif found is not None:
            raise ObjectAlreadyExists(key)
        segments = key.split("/")
        blocker = dirfs.make_parents(self._objects, segments, replace_files=False)
        if blocker is not None:
            existing = blocker.relative_to(self._objects).as_posix()
            raise InvalidObjectKey(
                f"key {key!r} would nest under the existing object {existing!r}; the directory "
                "bucket cannot hold an object and objects below it",
                key=key,
            )
        dirfs.make_parents(self._meta, segments, replace_files=True)
        meta_target = self._meta_path(key)
        if os.path.isdir(meta_target) and not os.path.islink(meta_target):
            dirfs.remove_tree(meta_target)  # sidecars of keys below with no object
        if not dirfs.is_regular(meta_tmp):  # the fast attempt moved it; stage it again
            meta_tmp = dirfs.stage(self._tmp, meta_bytes)
        try:
            os.rename(meta_tmp, meta_target)
        finally:
            dirfs.discard(meta_tmp)
        self._barrier.sync()
        os.link(data_tmp, target)
        self._barrier.sync()

    def head(self, key: str) -> ObjectInfo:
        validate_key(key)
        try:
            with self._locked(exclusive=False, key=key):
                return self._info(key)
        except OSError as exc:
            raise _io_error(exc, key) from exc

    def _info(self, key: str) -> ObjectInfo:
        found = dirfs.lstat_or_none(self._object_path(key))
        if found is None or not stat.S_ISREG(found.st_mode):
            raise ObjectNotFound(key)
        meta_path = self._meta_path(key)
        try:
            sidecar = parse_json(meta_path.read_bytes(), ValueError)
            info = ObjectInfo(
                key=key,
                size=int(sidecar["size"]),
                sha256=str(sidecar["sha256"]),
                version_id=str(sidecar["version_id"]),
                etag=str(sidecar["etag"]),
            )
        except (
            FileNotFoundError,
            NotADirectoryError,
            ValueError,
            KeyError,
            TypeError,
            OverflowError,  # int() of a size of 1e400 (infinity)
        ) as exc:
            raise ObjectStoreCorrupt(
                f"object {key!r} has no readable metadata sidecar at {meta_path} ({exc}); it was "
                "not written through the object store port — delete it and upload it again",
                key=key,
            ) from exc
        if info.size != found.st_size:
            raise ObjectStoreCorrupt(
                f"object {key!r} is {found.st_size} bytes but its sidecar says {info.size}; the "
                "file was changed outside the object store port",
                key=key,
            )
        return info

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        validate_key(key)
        first, stop = validate_range(start, end, key=key)
        try:
            with self._locked(exclusive=False, key=key):
                fd = self._open_object(key)
            try:
                size = os.fstat(fd).st_size
                last = size if stop is None else min(stop, size)
                return dirfs.pread_all(fd, first, last - first) if first < last else b""
            finally:
                os.close(fd)
        except OSError as exc:
            raise _io_error(exc, key) from exc

    def _open_object(self, key: str) -> int:
        """A read descriptor on the object file (it stays readable if the key is deleted)."""
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(self._object_path(key), flags)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ObjectNotFound(key) from exc
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ObjectNotFound(key) from exc
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ObjectNotFound(key)
        return fd

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        if "\x00" in prefix:
            raise InvalidArgument(f"list prefix {prefix!r} contains NUL")
        for key in self._matching_keys(prefix):
            try:
                yield self.head(key)
            except ObjectNotFound:
                continue  # deleted since the scan

    def _matching_keys(self, prefix: str) -> builtins.list[str]:
        directory, _, _ = prefix.rpartition("/")
        segments = directory.split("/") if directory else []
        if any(segment in ("", ".", "..") for segment in segments):
            return []
        start = self._objects.joinpath(*segments)
        keys: builtins.list[str] = []
        for dirpath, _dirnames, filenames in os.walk(start):
            base = Path(dirpath).relative_to(self._objects).as_posix()
            for name in filenames:
                key = name if base == "." else f"{base}/{name}"
                if key.startswith(prefix) and dirfs.is_regular(Path(dirpath) / name):
                    keys.append(key)
        keys.sort()
        return keys

    def delete(self, key: str, *, all_versions: bool = True) -> None:
        """Remove the object and its sidecar; a key holds one version, so ``all_versions`` and
        a plain delete are the same here."""
        validate_key(key)
        target = self._object_path(key)
        meta_target = self._meta_path(key)
        try:
            with self._locked(exclusive=True, key=key):
                if dirfs.is_regular(target):
                    os.unlink(target)
                    dirfs.fsync_dir(target.parent)
                    dirfs.prune_empty(self._objects, target.parent)
                if dirfs.is_regular(meta_target):
                    os.unlink(meta_target)
                    dirfs.prune_empty(self._meta, meta_target.parent)
        except OSError as exc:
            raise _io_error(exc, key) from exc

    def presign_put(self, key: str, size: int, sha256: str, expires_in: int) -> PresignedPut:
        validate_key(key)
        validate_sha256(sha256, key=key)
        if size < 0:
            raise InvalidArgument(f"size must be >= 0, got {size}", key=key)
        if not 1 <= expires_in <= MAX_PRESIGN_SECONDS:
            raise InvalidArgument(
                f"expires_in must be 1..{MAX_PRESIGN_SECONDS} seconds, got {expires_in}", key=key
            )
        return self._signer.sign(self._bucket, key, size, sha256, expires_in)

    def verify_presigned(self, bucket: str, key: str, query: Mapping[str, str]) -> SignedPut:
        """The fields a presigned URL is bound to; ``SignatureInvalid`` or ``SignatureExpired``."""
        return self._signer.verify(bucket, key, query)

    def handle_presigned_put(
        self,
        bucket: str,
        key: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
    ) -> HttpResponse:
        """Serve one presigned PUT (see :func:`presigned_http.handle_presigned_put`)."""
        return handle_presigned_put(self, bucket, key, query, headers, body)
