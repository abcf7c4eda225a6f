"""The configuration reader every loader shares: whatever a file holds, a dataclass whose fields
have their annotated types, or one ConfigError naming the setting and the value."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.configfile import ConfigError, build, checked_value, read_json_object, show
from baml_studio.format.errors import BamlStudioError
from json_fuzz import JSON_VALUES, mutations


@dataclass(frozen=True, slots=True)
class Inner:
    count: int
    ratio: float = 0.5

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"count={self.count} (must be >= 0)")


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    inner: Inner
    flag: bool = False
    versions: tuple[int, ...] = (1,)
    mode: Literal["on", "off"] = "on"
    limit: int | None = None
    secret: str | None = field(default=None, repr=False)


VALID = {
    "name": "n",
    "inner": {"count": 3, "ratio": 1.5},
    "flag": True,
    "versions": [1, 2],
    "mode": "off",
    "limit": None,
    "secret": "hunter2",
}


def assert_typed(sample: Sample) -> None:
    assert isinstance(sample.name, str) and isinstance(sample.flag, bool)
    assert type(sample.inner.count) is int and sample.inner.count >= 0
    assert isinstance(sample.inner.ratio, int | float) and not isinstance(sample.inner.ratio, bool)
    assert isinstance(sample.versions, tuple)
    assert all(type(v) is int for v in sample.versions)
    assert sample.mode in ("on", "off")
    assert sample.limit is None or type(sample.limit) is int
    assert sample.secret is None or isinstance(sample.secret, str)


def build_or_refuse(raw: Any) -> None:
    try:
        sample = build(Sample, raw, "sample.json")
    except ConfigError as exc:
        assert str(exc).startswith("sample.json")
        assert "hunter2" not in str(exc)
        return
    assert_typed(sample)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_fuzz_arbitrary_values_build_or_raise_config_error(raw: Any) -> None:
    build_or_refuse(raw)


@settings(max_examples=300, deadline=None)
@given(mutations(VALID))
def test_fuzz_mutated_documents_build_or_raise_config_error(raw: Any) -> None:
    build_or_refuse(raw)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=200) | JSON_VALUES.map(lambda v: json.dumps(v).encode()))
def test_fuzz_file_contents_read_as_an_object_or_raise_config_error(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(content)
    try:
        raw = read_json_object(path)
    except ConfigError as exc:
        assert str(path) in str(exc)
        return
    assert isinstance(raw, dict)


def test_the_valid_document_builds() -> None:
    sample = build(Sample, VALID, "sample.json")
    assert sample == Sample("n", Inner(3, 1.5), True, (1, 2), "off", None, "hunter2")
    assert build(Sample, {"name": "n", "inner": {"count": 0}}, "s").versions == (1,)


@pytest.mark.parametrize(
    ("raw", "fragments"),
    [
        (None, ["sample.json must be a JSON object", "None"]),
        ({**VALID, "nmae": 1}, ["unknown settings ['nmae']", "known: "]),
        ({"inner": {"count": 1}}, ["lacks the settings ['name']"]),
        ({**VALID, "inner": {"count": None}}, ["inner.count is None", "a whole number"]),
        ({**VALID, "inner": {"count": True}}, ["inner.count is True", "a whole number"]),
        ({**VALID, "inner": {"count": -1}}, ["sample.json: inner: count=-1 (must be >= 0)"]),
        ({**VALID, "inner": {"count": 1, "ratio": float("inf")}}, ["inner.ratio is inf"]),
        ({**VALID, "versions": "12"}, ["versions is '12'", "a list of whole numbers"]),
        ({**VALID, "versions": [1, None]}, ["versions is [1, None]"]),
        ({**VALID, "mode": "maybe"}, ["mode is 'maybe'", 'one of "on", "off"']),
        ({**VALID, "limit": 1.5}, ["limit is 1.5", "a whole number or null"]),
        ({**VALID, "secret": 5}, ["secret is (hidden)", "a string or null"]),
    ],
)
def test_refusals_name_the_setting_the_value_and_what_to_write(
    raw: Any, fragments: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        build(Sample, raw, "sample.json")
    assert isinstance(caught.value, BamlStudioError) and isinstance(caught.value, ValueError)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_a_loader_of_stored_state_chooses_its_error() -> None:
    class StoreError(Exception):
        pass

    with pytest.raises(StoreError, match="the record: inner is 5"):
        build(Sample, {**VALID, "inner": 5}, "the record", error=StoreError)
    with pytest.raises(StoreError, match="x is None"):
        checked_value(str, None, "the record", "x", error=StoreError)


@pytest.mark.parametrize(
    "content", [b"{", b"[]", b"\xff\xfe", b"[" * 100_000, b'"text"', b"null", b""]
)
def test_unusable_files_raise_config_error_naming_the_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=r"settings\.json"):
        read_json_object(path)


def test_show_stays_short_for_deep_and_long_values() -> None:
    deep: Any = 1
    for _ in range(500):
        deep = [deep]
    assert len(show(deep)) < 100
    assert len(show("x" * 10_000)) < 100
    assert len(show(10**200)) < 100


def test_keys_of_any_type_are_named_as_unknown() -> None:
    with pytest.raises(ConfigError, match=r"unknown settings \[1, 'x'\]"):
        build(Sample, {**VALID, 1: 2, "x": 3}, "sample.json")
