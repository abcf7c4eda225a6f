"""``dataplane.json`` and its ``limits``: whatever the file holds, a configuration or one
ConfigError (a ValueError) naming the file, the setting and the value; the CLI turns it into a
usage error (exit 2) without a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.cli_gateway import serve
from baml_studio.configfile import ConfigError
from baml_studio.gateway.config import PublisherLimits
from baml_studio.gateway.service import DataplaneConfig, load_dataplane_config
from json_fuzz import JSON_VALUES, mutations

LIMITS = PublisherLimits().as_publisher_config()
VALID = {
    "public_base_url": "https://gw.example.com",
    "bucket": "evidence",
    "limits": {**LIMITS, "supported_segment_versions": [2, 3]},
    "gateway": {"max_request_bytes": 1024, "head_concurrency": 4, "token_leeway_seconds": 2},
    "s3": {
        "bucket": "evidence",
        "endpoint_url": "http://127.0.0.1:9",
        "access_key_id": "id",
        "secret_access_key": "top-secret",
        "connect_timeout_seconds": 1.5,
    },
    "sqs": {"name": "proj", "create": True, "settings": {"max_receive_count": 3}},
    "s3_notifications": "off",
}
FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def load(data: Path, content: bytes) -> DataplaneConfig | None:
    """The configuration of ``content`` as ``dataplane.json``, or None after a ConfigError that
    names the file and keeps the S3 secret out."""
    (data / "dataplane.json").write_bytes(content)
    try:
        config = load_dataplane_config(data, host="127.0.0.1", port=1)
    except ConfigError as exc:
        assert "dataplane.json" in str(exc) and "top-secret" not in str(exc)
        return None
    limits = config.gateway.limits
    assert PublisherLimits.from_dict(limits.as_publisher_config()) == limits
    assert isinstance(config.public_base_url, str) and isinstance(config.bucket, str)
    return config


@FUZZ
@given(JSON_VALUES)
def test_fuzz_arbitrary_json_loads_or_raises_config_error(tmp_path: Path, raw: Any) -> None:
    load(tmp_path, json.dumps(raw).encode())


@FUZZ
@given(mutations(VALID))
def test_fuzz_mutated_dataplane_json_loads_or_raises_config_error(tmp_path: Path, raw: Any) -> None:
    load(tmp_path, json.dumps(raw).encode())


@FUZZ
@given(st.binary(max_size=200))
def test_fuzz_arbitrary_bytes_load_or_raise_config_error(tmp_path: Path, content: bytes) -> None:
    load(tmp_path, content)


def test_the_valid_dataplane_json_loads(tmp_path: Path) -> None:
    config = load(tmp_path, json.dumps(VALID).encode())
    assert config is not None and config.s3 is not None and config.sqs is not None
    assert config.gateway.limits.supported_segment_versions == (2, 3)
    assert config.gateway.head_concurrency == 4 and config.sqs.settings.max_receive_count == 3
    assert config.s3.secret_access_key == "top-secret" and config.s3_notifications == "off"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[]", "must hold a JSON object {...}, not []"),
        ("null", "must hold a JSON object {...}, not None"),
        ("{", "is not valid JSON"),
        ("[" * 5000, "is not valid JSON"),
        ('{"limts": {}}', "unknown settings ['limts']"),
        ('{"limits": null}', "limits must be a JSON object {...}, not None"),
        ('{"limits": {"max_object_bytes": null}}', "limits.max_object_bytes is None"),
        ('{"limits": {"supported_cas_versions": 5}}', "supported_cas_versions is 5"),
        ('{"limits": {"upload_url_ttl_seconds": 0}}', "upload_url_ttl_seconds"),
        ('{"gateway": {"nope": 1}}', "gateway has unknown settings ['nope']"),
        ('{"gateway": {"limits": {}}}', "gateway has unknown settings ['limits']"),
        ('{"gateway": {"max_request_bytes": "x"}}', "gateway.max_request_bytes is 'x'"),
        ('{"gateway": {"max_request_bytes": 0}}', "max_request_bytes must be >= 1, got 0"),
        ('{"s3": []}', "s3 must be a JSON object {...}, not []"),
        ('{"s3": {"bucket": "X"}}', "s3: bucket name 'X' is invalid"),
        ('{"s3": {"bucket": "evidence", "secret_access_key": 5}}', "secret_access_key is (hidden)"),
        ('{"sqs": {"settings": 5}}', "sqs.settings is 5"),
        ('{"sqs": {"name": "q"}}', "sqs needs s3"),
        ('{"s3_notifications": []}', "s3_notifications is []"),
        ('{"public_base_url": 5}', "public_base_url is 5; it must be a string"),
        ('{"bucket": "X"}', "bucket: bucket name 'X' is invalid"),
    ],
)
def test_bad_dataplane_json_raises_config_error_naming_the_setting(
    tmp_path: Path, content: str, fragment: str
) -> None:
    (tmp_path / "dataplane.json").write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_dataplane_config(tmp_path, host="127.0.0.1", port=1)
    assert fragment in str(caught.value) and str(tmp_path / "dataplane.json") in str(caught.value)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES | mutations(LIMITS))
def test_fuzz_publisher_limits_from_dict(raw: Any) -> None:
    try:
        limits = PublisherLimits.from_dict(raw)
    except ConfigError:
        return
    assert PublisherLimits.from_dict(limits.as_publisher_config()) == limits


@pytest.mark.parametrize(
    "raw",
    [
        [None, 1.5],
        {"shipped_value_retention_seconds": None},
        {"supported_cas_versions": [None]},
        {"supported_cas_versions": "ab"},
        {"flush_interval_seconds": True},
        {"max_object_bytes": 1.5},
    ],
)
def test_publisher_limits_of_the_wrong_type_raise_config_error(raw: Any) -> None:
    with pytest.raises(ConfigError, match="publisher limits"):
        PublisherLimits.from_dict(raw)


def test_cli_reports_a_bad_dataplane_json_as_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "dataplane.json").write_text('{"limits": {"max_object_bytes": null}}')
    result = CliRunner().invoke(serve, ["dataplane", "--data", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "limits.max_object_bytes is None; it must be a whole number" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
