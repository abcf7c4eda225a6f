"""``FunctionTableV1``: the CAS codec-2 body naming an engine's functions (reference facts §4.6).

::

    body     := u16 body_version(=1) ‖ u32 function_count ‖ function* ‖ u32 file_count ‖ file*
    function := u32 function_id ‖ str fqn ‖ str display_name ‖ opt str definition_key
                ‖ u8 kind ‖ opt str kind_detail ‖ u8 origin ‖ opt str source_file
                ‖ opt (u32 file_id ‖ u32 start ‖ u32 end) ‖ opt str package_name
                ‖ u16 namespace_count ‖ str*
    file     := u32 file_id ‖ str path

Functions are strictly ascending by id and files by file_id (``FunctionTableUnordered``
otherwise). ``kind``/``origin`` 255 means unknown; any unlisted code decodes to ``None``.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from dataclasses import dataclass

from baml_studio.format.binio import Buffer, Reader, Writer
from baml_studio.format.cas import CODEC_FUNCTION_TABLE
from baml_studio.format.errors import EncodeError, FunctionTableUnordered, UnsupportedVersion
from baml_studio.format.ids import value_cid

FUNCTION_TABLE_VERSION = 1
CODE_UNKNOWN = 255


class FunctionKind(enum.IntEnum):
    BYTECODE = 0
    SYSOP = 1
    NATIVE = 2
    NATIVE_UNRESOLVED = 3

    @property
    def sql(self) -> str:
        """SQL spelling: ``bytecode|sysop|native|native_unresolved``."""
        return self.name.lower()


class FunctionOrigin(enum.IntEnum):
    USER = 0
    COMPANION = 1
    INTERNAL = 2
    BUILTIN = 3
    AUTO_DERIVE = 4

    @property
    def sql(self) -> str:
        """SQL spelling: ``user|companion|internal|builtin|auto_derive``."""
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class FunctionSpan:
    """A function's source span: ``file_id ‖ start ‖ end`` (3 × u32)."""

    file_id: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class FunctionEntry:
    function_id: int
    fqn: str
    display_name: str
    definition_key: str | None = None
    kind: FunctionKind | None = None
    kind_detail: str | None = None  # the sysop name for SYSOP entries
    origin: FunctionOrigin | None = None
    source_file: str | None = None
    source_span: FunctionSpan | None = None
    package_name: str | None = None
    namespace: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SourceFile:
    file_id: int
    path: str


@dataclass(frozen=True, slots=True)
class FunctionTable:
    functions: tuple[FunctionEntry, ...] = ()
    files: tuple[SourceFile, ...] = ()

    def function(self, function_id: int) -> FunctionEntry | None:
        """The entry for ``function_id`` (binary search: functions are sorted by id)."""
        index = bisect_left(self.functions, function_id, key=lambda f: f.function_id)
        found = index < len(self.functions) and self.functions[index].function_id == function_id
        return self.functions[index] if found else None

    def file_path(self, file_id: int) -> str | None:
        """The path of ``file_id`` (binary search: files are sorted by id)."""
        index = bisect_left(self.files, file_id, key=lambda f: f.file_id)
        found = index < len(self.files) and self.files[index].file_id == file_id
        return self.files[index].path if found else None


_KINDS = {int(k): k for k in FunctionKind}
_ORIGINS = {int(o): o for o in FunctionOrigin}


def _ascending(ids: list[int], what: str) -> None:
    for index in range(1, len(ids)):
        if ids[index - 1] >= ids[index]:
            raise EncodeError(f"{what} must be strictly ascending: {ids[index - 1]}, {ids[index]}")


def encode_function_table(table: FunctionTable) -> bytes:
    """The deterministic codec-2 body (identical tables give identical bytes)."""
    _ascending([f.function_id for f in table.functions], "function ids")
    _ascending([f.file_id for f in table.files], "file ids")
    w = Writer()
    w.u16(FUNCTION_TABLE_VERSION)
    w.u32(len(table.functions))
    for f in table.functions:
        w.u32(f.function_id)
        w.string(f.fqn)
        w.string(f.display_name)
        w.opt(f.definition_key, w.string)
        w.u8(CODE_UNKNOWN if f.kind is None else int(f.kind))
        w.opt(f.kind_detail, w.string)
        w.u8(CODE_UNKNOWN if f.origin is None else int(f.origin))
        w.opt(f.source_file, w.string)
        span = f.source_span
        if span is None:
            w.u8(0)
        else:
            w.u8(1)
            w.u32(span.file_id)
            w.u32(span.start)
            w.u32(span.end)
        w.opt(f.package_name, w.string)
        w.u16(len(f.namespace))
        for part in f.namespace:
            w.string(part)
    w.u32(len(table.files))
    for file in table.files:
        w.u32(file.file_id)
        w.string(file.path)
    return w.getvalue()


def decode_function_table(raw: Buffer) -> FunctionTable:
    """Decode a codec-2 body (the CAS object's body, not the whole file)."""
    r = Reader(raw)
    version = r.u16()
    if version != FUNCTION_TABLE_VERSION:
        raise UnsupportedVersion(version, FUNCTION_TABLE_VERSION)
    functions: list[FunctionEntry] = []
    for _ in range(r.u32()):
        function_id = r.u32()
        if functions and functions[-1].function_id >= function_id:
            raise FunctionTableUnordered(
                f"function id {function_id} follows {functions[-1].function_id}"
            )
        fqn, display_name, definition_key = r.string(), r.string(), r.opt(r.string)
        kind, kind_detail = _KINDS.get(r.u8()), r.opt(r.string)
        origin, source_file = _ORIGINS.get(r.u8()), r.opt(r.string)
        span = FunctionSpan(r.u32(), r.u32(), r.u32()) if r.flag() else None
        package_name = r.opt(r.string)
        namespace = tuple(r.string() for _ in range(r.u16()))
        functions.append(
            FunctionEntry(
                function_id,
                fqn,
                display_name,
                definition_key,
                kind,
                kind_detail,
                origin,
                source_file,
                span,
                package_name,
                namespace,
            )
        )
    files: list[SourceFile] = []
    for _ in range(r.u32()):
        file_id = r.u32()
        if files and files[-1].file_id >= file_id:
            raise FunctionTableUnordered(f"file id {file_id} follows {files[-1].file_id}")
        files.append(SourceFile(file_id, r.string()))
    r.finish()
    return FunctionTable(tuple(functions), tuple(files))


def function_table_cid(table: FunctionTable) -> bytes:
    """The table's CAS id: ``value_cid(2, encode_function_table(table))``."""
    return value_cid(CODEC_FUNCTION_TABLE, encode_function_table(table))
