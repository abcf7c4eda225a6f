"""Arrow IPC streams from another process (``baml_studio.arrowipc.read_stream``): a stream reads
as its table; random bytes and damaged streams raise ``InvalidArrowStream`` or read as a fully
valid table, never another exception."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrow_damage import damage
from baml_studio.arrowipc import InvalidArrowStream, read_stream

TABLE = pa.table({"s": ["ab", None, "cd"], "n": [1, 2, None], "l": [["x"], [], None]})


def _stream(table: pa.Table, chunk: int | None = None) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return sink.getvalue()


@pytest.mark.parametrize("chunk", [None, 1])
def test_a_stream_reads_as_its_table(chunk: int | None) -> None:
    assert read_stream(_stream(TABLE, chunk)).equals(TABLE)


@pytest.mark.parametrize("body", [b"", b"not arrow", _stream(TABLE)[:-20]])
def test_what_is_not_a_stream_is_refused(body: bytes) -> None:
    with pytest.raises(InvalidArrowStream):
        read_stream(body)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_damaged_streams_are_refused_or_valid(data: st.DataObject) -> None:
    body = damage(data, _stream(TABLE, data.draw(st.none() | st.integers(1, 2))))
    try:
        table = read_stream(body)
    except InvalidArrowStream:
        return
    table.validate(full=True)
