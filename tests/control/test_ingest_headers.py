"""The batch headers (``control.ingest.parse_headers``): any text in any header, the path's batch
id included, is read or refused with a typed 400, never another exception; ``X-Baml-Partition``
takes ASCII digits only (``str.isdigit`` also takes ``"²"``, which ``int`` refuses)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from baml_studio.apierrors import BadRequest
from baml_studio.control.ingest import BatchRequest, parse_headers
from baml_studio.control.schemas import PUBLIC_RELATION_NAMES

VALID = {
    "content-encoding": "zstd",
    "x-baml-root-id": "exec_1",
    "x-baml-project-id": "prj",
    "x-baml-environment-id": "prod",
    "x-baml-relation": "calls_v1",
    "x-baml-partition": "0",
    "x-baml-projection-generation": "gen_1",
    "x-baml-content-digest": "sha256:" + "0" * 64,
}
HOSTILE_DIGITS = ["²", "³", "¹⁰", "٣", "０", "１２", "𝟘", "-1", "+1", " 1", "1 ", "1_0", "1e3"]
HEADER_TEXT = (
    st.text(max_size=40)
    | st.sampled_from(HOSTILE_DIGITS)
    | st.sampled_from(sorted(PUBLIC_RELATION_NAMES))
    | st.integers(0, 10**400).map(str)
)


def test_the_valid_headers_are_read() -> None:
    request = parse_headers(VALID, "exec_1.calls_v1.0")
    assert (request.partition, request.relation, request.root_id) == (0, "calls_v1", "exec_1")


@pytest.mark.parametrize("partition", [*HOSTILE_DIGITS, "1234567890", "9" * 400])
def test_a_partition_that_is_not_ascii_digits_is_a_typed_400(partition: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_headers({**VALID, "x-baml-partition": partition}, "b1")
    assert caught.value.status == 400 and caught.value.code == "invalid_partition"
    assert repr(partition) in str(caught.value)


def test_the_largest_partition_is_nine_digits() -> None:
    largest = parse_headers({**VALID, "x-baml-partition": "999999999"}, "exec_1.calls_v1.999999999")
    assert largest.partition == 999999999


@settings(max_examples=300, deadline=None)
@given(
    replaced=st.dictionaries(st.sampled_from(sorted(VALID)), HEADER_TEXT, max_size=len(VALID)),
    dropped=st.sets(st.sampled_from(sorted(VALID)), max_size=2),
    batch_id=st.just("exec_1.calls_v1.0") | st.text(max_size=300),
)
@example(replaced={"x-baml-partition": "²"}, dropped=set(), batch_id="exec_1.calls_v1.0")
def test_any_header_text_is_read_or_a_typed_400(
    replaced: dict[str, str], dropped: set[str], batch_id: str
) -> None:
    headers = {k: v for k, v in {**VALID, **replaced}.items() if k not in dropped}
    try:
        request = parse_headers(headers, batch_id)
    except BadRequest as exc:
        assert exc.status == 400 and exc.code
        return
    assert isinstance(request, BatchRequest)
    text = headers["x-baml-partition"]
    assert text.isascii() and text.isdigit() and request.partition == int(text) < 10**9
