"""The registry of BAML functions known to the process, and the programs (engines) built from it.

Functions are registered by the ``@baml_function`` decorator, usually at import time. Each gets
a process-stable ``function_id`` (1-based, registration order) and, when Python can find its
source, a file id and byte span. A :class:`ProgramSnapshot` freezes the registry for one engine:
its ``FunctionTableV1`` and its ``program_id`` (the program hash over the source files of the
registered functions). Registering a function after an engine started makes the next root start a
new engine with a new snapshot, so a function table never lacks a function that calls reference.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baml_studio.format.function_table import (
    FunctionEntry,
    FunctionKind,
    FunctionOrigin,
    FunctionSpan,
    FunctionTable,
    SourceFile,
    encode_function_table,
)
from baml_studio.format.ids import value_cid
from baml_studio.format.program import program_id as compute_program_id
from baml_studio.format.records import CallSiteSpan
from baml_studio.profiler.errors import FunctionRegistrationError

CODEC_FUNCTION_TABLE = 2


@dataclass(frozen=True, slots=True)
class FunctionInfo:
    function_id: int
    fqn: str
    llm: bool
    file_id: int | None
    span: tuple[int, int, int] | None  # (file_id, start_offset, end_offset)
    line: int


@dataclass(frozen=True, slots=True)
class ProgramSnapshot:
    """One engine's view of the registry."""

    version: int
    program_id: bytes
    table: FunctionTable
    table_body: bytes
    table_cid: bytes


class _SourceFile:
    __slots__ = ("data", "file_id", "line_starts", "path")

    def __init__(self, file_id: int, path: str, data: bytes) -> None:
        self.file_id = file_id
        self.path = path
        self.data = data
        starts = [0]
        pos = data.find(b"\n")
        while pos >= 0:
            starts.append(pos + 1)
            pos = data.find(b"\n", pos + 1)
        self.line_starts = starts

    def line_span(self, line: int) -> tuple[int, int] | None:
        if line < 1 or line > len(self.line_starts):
            return None
        start = self.line_starts[line - 1]
        end = self.line_starts[line] - 1 if line < len(self.line_starts) else len(self.data)
        return start, end


def _redefinition(old: Callable[..., Any], new: Callable[..., Any]) -> bool:
    """``new`` is ``old`` defined again: the same module and qualified name (``importlib.reload``,
    a notebook cell run again), which used to raise. It keeps the first definition's id and
    source span."""
    names = ("__module__", "__qualname__")
    old_names = tuple(getattr(inspect.unwrap(old), name, None) for name in names)
    return None not in old_names and old_names == tuple(
        getattr(inspect.unwrap(new), name, None) for name in names
    )


class FunctionRegistry:
    """Thread-safe registry of BAML functions; one per process by default (:data:`REGISTRY`)."""

    def __init__(self, baml_version: str = "0.17.0") -> None:
        self._lock = threading.Lock()
        self._baml_version = baml_version
        self._functions: dict[str, FunctionInfo] = {}
        self._callables: dict[str, Callable[..., Any]] = {}
        self._files: dict[str, _SourceFile] = {}
        self._sites: dict[tuple[str, int], CallSiteSpan | None] = {}
        self.version = 0
        self._snapshot: ProgramSnapshot | None = None

    def register(self, fqn: str, fn: Callable[..., Any] | None, *, llm: bool) -> FunctionInfo:
        with self._lock:
            existing = self._functions.get(fqn)
            if existing is not None:
                if fn is not None and self._callables.get(fqn) not in (None, fn):
                    old = self._callables[fqn]
                    same_code = getattr(old, "__code__", None) is getattr(fn, "__code__", None)
                    if not same_code and not _redefinition(old, fn):
                        raise FunctionRegistrationError(
                            f"BAML function {fqn!r} is already registered to {old!r}; "
                            "give the second function another name"
                        )
                    self._callables[fqn] = fn  # a module reloaded, a notebook cell run again
                return existing
            file_id, span, line = self._locate(fn)
            info = FunctionInfo(len(self._functions) + 1, fqn, llm, file_id, span, line)
            self._functions[fqn] = info
            if fn is not None:
                self._callables[fqn] = fn
            self.version += 1
            self._snapshot = None
            return info

    def _locate(self, fn: Callable[..., Any] | None) -> tuple[int | None, Any, int]:
        if fn is None:
            return None, None, 0
        try:
            target = inspect.unwrap(fn)
            path = inspect.getsourcefile(target)
            lines, first = inspect.getsourcelines(target)
        except (OSError, TypeError):
            return None, None, 0
        if path is None:
            return None, None, 0
        src = self._file(path)
        if src is None:
            return None, None, 0
        first = max(first, 1)
        head = src.line_span(first)
        tail = src.line_span(first + len(lines) - 1)
        if head is None or tail is None:
            return src.file_id, None, first
        return src.file_id, (src.file_id, head[0], tail[1]), first

    def _file(self, path: str) -> _SourceFile | None:
        src = self._files.get(path)
        if src is None:
            try:
                data = Path(path).read_bytes()
            except OSError:
                return None
            src = _SourceFile(len(self._files) + 1, path, data)
            self._files[path] = src
        return src

    def call_site(self, filename: str, line: int) -> CallSiteSpan | None:
        """The call site at ``filename:line``, if that file holds a registered function."""
        key = (filename, line)
        try:
            return self._sites[key]
        except KeyError:
            pass
        src = self._files.get(filename)
        site = None
        if src is not None:
            span = src.line_span(line)
            if span is not None:
                site = CallSiteSpan(src.file_id, span[0], span[1], line)
        self._sites[key] = site
        return site

    def snapshot(self) -> ProgramSnapshot:
        """The registry frozen for an engine (cached until the next registration)."""
        with self._lock:
            if self._snapshot is not None:
                return self._snapshot
            functions = tuple(
                FunctionEntry(
                    function_id=info.function_id,
                    fqn=info.fqn,
                    display_name=info.fqn.rsplit(".", 1)[-1],
                    definition_key=info.fqn,
                    kind=FunctionKind.BYTECODE,
                    kind_detail="llm" if info.llm else None,
                    origin=FunctionOrigin.USER,
                    source_file=self._path_of(info.file_id),
                    source_span=FunctionSpan(*info.span) if info.span is not None else None,
                    package_name=info.fqn.split(".", 1)[0] if "." in info.fqn else None,
                    namespace=tuple(info.fqn.split(".")[:-1]),
                )
                for info in sorted(self._functions.values(), key=lambda i: i.function_id)
            )
            files = tuple(
                SourceFile(src.file_id, src.path)
                for src in sorted(self._files.values(), key=lambda s: s.file_id)
            )
            table = FunctionTable(functions=functions, files=files)
            body = encode_function_table(table)
            sources = {src.path: src.data for src in self._files.values()}
            pid = compute_program_id(self._baml_version, sources)
            self._snapshot = ProgramSnapshot(
                self.version, pid, table, body, value_cid(CODEC_FUNCTION_TABLE, body)
            )
            return self._snapshot

    def _path_of(self, file_id: int | None) -> str | None:
        for src in self._files.values():
            if src.file_id == file_id:
                return src.path
        return None


REGISTRY = FunctionRegistry()
"""The process-wide registry the decorators register into."""
