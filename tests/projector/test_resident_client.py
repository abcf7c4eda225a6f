"""The resident query client's decode of the control plane's answer
(``projector.resident_client.resident_query``): random bytes and damaged Arrow IPC streams give
``ControlPlaneUnavailable`` or a fully valid table, never another exception, and never a table
whose buffers point past its data (using one could crash the process)."""

from __future__ import annotations

import io

import httpx
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrow_damage import damage
from baml_studio.gateway.config import Scope
from baml_studio.projector.control_client import ARROW_STREAM, ControlClient
from baml_studio.projector.errors import ControlPlaneUnavailable
from baml_studio.projector.resident_client import ResidentResult, resident_query

SCOPE = Scope("tn_a", "prj", "prod")
SCHEMA = pa.schema(
    [
        ("execution_id", pa.string()),
        ("n", pa.int64()),
        ("tags", pa.list_(pa.string())),
        ("at", pa.timestamp("ns", tz="UTC")),
    ]
)
TEXT = st.text(max_size=12)


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    rows = draw(st.integers(0, 8))

    def column(values: st.SearchStrategy[object]) -> list[object]:
        return draw(st.lists(st.none() | values, min_size=rows, max_size=rows))

    return pa.table(
        {
            "execution_id": column(TEXT),
            "n": column(st.integers(-(2**63), 2**63 - 1)),
            "tags": column(st.lists(TEXT, max_size=3)),
            "at": pa.array(column(st.integers(0, 2**62)), pa.int64()).cast(SCHEMA.field(3).type),
        },
        schema=SCHEMA,
    )


def stream(table: pa.Table, chunk: int | None) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return sink.getvalue()


def answered(body: bytes) -> ResidentResult:
    """``resident_query`` against a control plane that answers 200 with ``body``."""

    def control_plane(request: httpx.Request) -> httpx.Response:
        headers = {"Content-Type": ARROW_STREAM, "X-Baml-Projection-Generation": "gen_1"}
        return httpx.Response(200, content=body, headers=headers)

    http = httpx.Client(transport=httpx.MockTransport(control_plane))
    with ControlClient("http://control", "token", client=http, retries=0) as client:
        return resident_query(client, SCOPE, "SELECT 1", generation="gen_1")


def read_or_unavailable(body: bytes) -> pa.Table | None:
    try:
        result = answered(body)
    except ControlPlaneUnavailable as exc:
        assert exc.transient and "Arrow stream" in str(exc)
        return None
    result.table.validate(full=True)
    assert result.generation == "gen_1"
    return result.table


def test_an_answer_reads_as_its_table() -> None:
    table = pa.table(
        {"execution_id": ["a", None], "n": [1, 2], "tags": [["x"], []], "at": [0, 1]}
    ).cast(SCHEMA)
    assert answered(stream(table, 1)).table.equals(table)


@pytest.mark.parametrize("body", [b"", b"not arrow", b"\xff\xff\xff\xff" + b"\x00" * 12])
def test_a_body_that_is_not_arrow_is_unavailable(body: bytes) -> None:
    assert read_or_unavailable(body) is None


def test_offsets_past_the_data_are_refused_not_returned() -> None:
    """A stream Arrow's reader alone reads (its messages are well formed) but whose string
    offsets point past the data: only full validation finds it."""
    table = pa.table({"s": ["ab", "cd"]})
    good = stream(table, None)
    offsets = pa.array([0, 2, 4], pa.int32()).buffers()[1].to_pybytes()
    at = good.index(offsets)
    damaged = good[:at] + pa.array([0, 2, 9999], pa.int32()).buffers()[1].to_pybytes()
    damaged += good[at + len(offsets) :]
    with pa.ipc.open_stream(damaged) as reader:
        read = reader.read_all()  # Arrow's reader takes it
    with pytest.raises(pa.ArrowInvalid):
        read.validate(full=True)
    assert read_or_unavailable(damaged) is None


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_damaged_answers_are_unavailable_or_valid_tables(data: st.DataObject) -> None:
    table = data.draw(tables())
    good = stream(table, data.draw(st.none() | st.integers(1, 3)))
    read_or_unavailable(damage(data, good))


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=512))
def test_random_answers_are_unavailable_or_valid_tables(body: bytes) -> None:
    read_or_unavailable(body)
