"""``PublisherSettings`` refuses, at construction, every value no publisher can run with."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from baml_studio.publisher import PublisherSettings
from baml_studio.publisher.config import MAX_ZSTD_LEVEL, MIN_ZSTD_LEVEL

ROOT = Path("/store")
URL = "http://127.0.0.1:8080"

SECONDS = (
    "config_refresh_seconds",
    "auth_retry_seconds",
    "request_timeout_seconds",
    "backoff_base_seconds",
    "retry_after_max_seconds",
)


def settings(**changes: Any) -> PublisherSettings:
    return PublisherSettings(ROOT, URL, **changes)


def test_the_defaults_and_the_edges_are_accepted() -> None:
    settings()
    settings(zstd_level=MIN_ZSTD_LEVEL)
    settings(zstd_level=MAX_ZSTD_LEVEL)
    settings(corrupt_block_seconds=0, disk_budget_bytes=0, put_attempts=1)
    settings(backoff_base_seconds=2, backoff_max_seconds=2)
    PublisherSettings(ROOT, "https://gateway.example.com/studio")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gateway_url", "gateway.example.com"),
        ("gateway_url", "ftp://gateway.example.com"),
        ("gateway_url", "http://"),
        ("gateway_url", "http://[::1"),
        ("zstd_level", MAX_ZSTD_LEVEL + 1),
        ("zstd_level", MIN_ZSTD_LEVEL - 1),
        ("zstd_level", 3.0),
        ("zstd_level", True),
        *[(name, value) for name in SECONDS for value in (0, -1, math.inf, math.nan, "5")],
        ("backoff_max_seconds", 0.1),  # below the default base of 0.5
        ("corrupt_block_seconds", -1),
        ("corrupt_block_seconds", math.nan),
        ("put_attempts", 0),
        ("put_attempts", 2.0),
        ("disk_budget_bytes", -1),
        ("disk_budget_bytes", 1.5),
        ("release_shipped_segments", 1),
    ],
)
def test_a_bad_value_names_its_field_and_value(field: str, value: object) -> None:
    if field == "gateway_url":
        with pytest.raises(ValueError, match="gateway URL") as caught:
            PublisherSettings(ROOT, str(value))
    else:
        with pytest.raises(ValueError, match=field) as caught:
            settings(**{field: value})
    assert repr(value) in str(caught.value)


@given(
    level=st.integers(min_value=MIN_ZSTD_LEVEL - 5, max_value=MAX_ZSTD_LEVEL + 5),
    timeout=st.floats(allow_nan=True, allow_infinity=True),
    attempts=st.integers(min_value=-3, max_value=10),
)
def test_construction_accepts_exactly_the_usable_values(
    level: int, timeout: float, attempts: int
) -> None:
    usable = (
        MIN_ZSTD_LEVEL <= level <= MAX_ZSTD_LEVEL
        and math.isfinite(timeout)
        and timeout > 0
        and attempts >= 1
    )
    try:
        settings(zstd_level=level, request_timeout_seconds=timeout, put_attempts=attempts)
    except ValueError:
        assert not usable
    else:
        assert usable
