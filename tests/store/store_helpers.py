"""Shared helpers of the store tests: segment encoders, a fault-injecting filesystem, and a
subprocess that holds a stream open (coordinated through pipes, never sleeps)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from baml_studio.format.data import encode_data_segment
from baml_studio.format.ids import ThreadRef
from baml_studio.format.meta import encode_meta_segment
from baml_studio.format.records import (
    CctSection,
    DataGroup,
    DataSegment,
    EngineStarted,
    ExecutionHealth,
    MetaRecord,
    MetaSegment,
    RootEnded,
    RootStarted,
    RootStatus,
    StreamStarted,
    ThreadKind,
    ThreadStart,
)
from baml_studio.store import OsFileSystem
from baml_studio.store.fsops import StrPath

HOLDER = Path(__file__).with_name("stream_holder.py")


def meta_bytes(euid: bytes, sequence: int, records: tuple[MetaRecord, ...] = ()) -> bytes:
    if not records:
        records = (
            (StreamStarted(os.getpid(), 1, "0.17.0", "linux-x86_64"),)
            if sequence == 1
            else (EngineStarted(sequence, b"\x11" * 16),)
        )
    return encode_meta_segment(MetaSegment(sequence, euid, 0, records))


def data_bytes(euid: bytes, sequence: int, roots: tuple[ThreadRef, ...] = ()) -> bytes:
    roots = roots or (ThreadRef(euid, 1, sequence),)
    groups = tuple(
        DataGroup(
            root, CctSection(), (ThreadStart(root, None, None, None, 5, ThreadKind.ROOT, "main"),)
        )
        for root in sorted(roots)
    )
    return encode_data_segment(DataSegment(sequence, euid, groups))


def meta_encoder(euid: bytes, records: tuple[MetaRecord, ...] = ()) -> Callable[[int], bytes]:
    return lambda sequence: meta_bytes(euid, sequence, records)


def data_encoder(euid: bytes, roots: tuple[ThreadRef, ...] = ()) -> Callable[[int], bytes]:
    return lambda sequence: data_bytes(euid, sequence, roots)


def root_started(root: ThreadRef) -> RootStarted:
    return RootStarted(root, 10, b"\x22" * 16)


def root_ended(root: ThreadRef, data_seq: int) -> RootEnded:
    return RootEnded(root, 20, RootStatus.SUCCEEDED, 0, data_seq, data_seq, 1, ExecutionHealth())


def files_under(path: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def pending_files(root: Path) -> list[Path]:
    return sorted((root / "tmp").glob("*.pending"))


def oserror(code: int) -> OSError:
    return OSError(code, os.strerror(code))


@dataclass
class Fault:
    error: OSError
    when: Callable[[Path], bool] = lambda _path: True
    times: int = 1


@dataclass
class FaultyFs(OsFileSystem):
    """The real filesystem, with one-shot faults per operation and a call log."""

    faults: dict[str, Fault] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    free: int | None = None
    before_rename: Callable[[Path, Path], None] | None = None

    def fail(
        self,
        op: str,
        code: int = errno.EIO,
        *,
        when: Callable[[Path], bool] | None = None,
        times: int = 1,
    ) -> None:
        self.faults[op] = Fault(oserror(code), when or (lambda _p: True), times)

    def _check(self, op: str, path: StrPath | None) -> None:
        self.calls.append((op, "" if path is None else os.fspath(path)))
        fault = self.faults.get(op)
        if fault is not None and fault.times > 0 and (path is None or fault.when(Path(path))):
            fault.times -= 1
            raise fault.error

    def ops(self, op: str) -> list[str]:
        return [path for name, path in self.calls if name == op]

    def create_new(self, path: StrPath) -> int:
        self._check("create_new", path)
        return super().create_new(path)

    def write_all(self, fd: int, data: bytes) -> None:
        self._check("write_all", None)
        super().write_all(fd, data)

    def fsync(self, fd: int) -> None:
        self._check("fsync", None)
        super().fsync(fd)

    def rename(self, src: StrPath, dst: StrPath) -> None:
        if self.before_rename is not None:
            self.before_rename(Path(src), Path(dst))
        self._check("rename", dst)
        super().rename(src, dst)

    def rename_new(self, src: StrPath, dst: StrPath) -> None:
        """Faulted and logged as ``rename``: the publication's rename step."""
        if self.before_rename is not None:
            self.before_rename(Path(src), Path(dst))
        self._check("rename", dst)
        super().rename_new(src, dst)

    def fsync_dir(self, path: StrPath) -> None:
        self._check("fsync_dir", path)
        super().fsync_dir(path)

    def mkdir(self, path: StrPath) -> None:
        self._check("mkdir", path)
        super().mkdir(path)

    def sync_filesystem(self, path: StrPath) -> None:
        self._check("sync_filesystem", path)
        super().sync_filesystem(path)

    def free_bytes(self, path: StrPath) -> int:
        self._check("free_bytes", path)
        return self.free if self.free is not None else super().free_bytes(path)


@dataclass
class Holder:
    """A subprocess with a stream open; ``status`` is its first stdout line."""

    process: subprocess.Popen[str]
    status: str

    def release(self) -> int:
        assert self.process.stdin is not None
        if self.process.poll() is None:
            self.process.stdin.write("\n")
            self.process.stdin.flush()
        return self.process.wait(timeout=60)


@contextmanager
def hold_stream(root: Path, euid: bytes, publish: int = 0) -> Iterator[Holder]:
    """Run ``stream_holder.py`` until the block exits; it reports ``ready`` once the stream
    is open (after ``publish`` meta segments) or ``in-use`` if it could not open it."""
    process = subprocess.Popen(
        [sys.executable, str(HOLDER), str(root), euid.hex(), str(publish)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    holder = Holder(process, process.stdout.readline().strip())
    try:
        yield holder
    finally:
        holder.release()
