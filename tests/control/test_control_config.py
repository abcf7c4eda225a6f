"""``control.json``: whatever the file holds, a ControlConfig whose settings have their types and
ranges, or one ConfigError (a ValueError) naming the file, the setting and the value; ``serve
control`` turns it into a usage error (exit 2) before opening any store."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.cli_control import serve_control
from baml_studio.configfile import ConfigError
from baml_studio.control.config import DEFAULT_RESIDENT_CAPS, ControlConfig
from json_fuzz import JSON_VALUES, mutations

VALID = {
    "metastore_url": "sqlite:///elsewhere.db",
    "facts_dsn": "https://user:pass@ch.example.com:8443",
    "facts_database": "facts",
    "snapshot_ttl_s": 120,
    "max_concurrent_queries": 4,
    "resident_caps": asdict(DEFAULT_RESIDENT_CAPS),
    "batch_limits": {"max_body_bytes": 1024, "max_uncompressed_bytes": 4096},
    "batch_auth_cache_s": 0.5,
}
FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def load(data: Path, content: bytes) -> ControlConfig | None:
    (data / "control.json").write_bytes(content)
    try:
        config = ControlConfig.from_data_dir(data)
    except ConfigError as exc:
        assert "control.json" in str(exc)
        return None
    for name in ("metastore_url", "facts_dsn", "facts_database"):
        assert isinstance(getattr(config, name), str)
    assert type(config.snapshot_ttl_s) is int and config.snapshot_ttl_s >= 1
    assert type(config.max_concurrent_queries) is int and config.max_concurrent_queries >= 1
    assert not isinstance(config.batch_auth_cache_s, bool) and config.batch_auth_cache_s >= 0
    for value in (*asdict(config.resident_caps).values(), *asdict(config.batch_limits).values()):
        assert type(value) is int and value >= 1
    return config


@FUZZ
@given(JSON_VALUES)
def test_fuzz_arbitrary_json_loads_or_raises_config_error(tmp_path: Path, raw: Any) -> None:
    load(tmp_path, json.dumps(raw).encode())


@FUZZ
@given(mutations(VALID))
def test_fuzz_mutated_control_json_loads_or_raises_config_error(tmp_path: Path, raw: Any) -> None:
    load(tmp_path, json.dumps(raw).encode())


@FUZZ
@given(st.binary(max_size=200))
def test_fuzz_arbitrary_bytes_load_or_raise_config_error(tmp_path: Path, content: bytes) -> None:
    load(tmp_path, content)


def test_defaults_then_control_json_then_overrides(tmp_path: Path) -> None:
    config = load(tmp_path, json.dumps(VALID).encode())
    assert config is not None
    assert config.metastore_url == "sqlite:///elsewhere.db" and config.snapshot_ttl_s == 120
    assert config.batch_limits.max_body_bytes == 1024 and config.resident_caps.max_wall_ms > 0
    overridden = ControlConfig.from_data_dir(tmp_path, metastore_url="sqlite:///x", facts_dsn=None)
    assert overridden.metastore_url == "sqlite:///x"
    assert overridden.facts_dsn == VALID["facts_dsn"]
    (tmp_path / "control.json").unlink()
    default = ControlConfig.from_data_dir(tmp_path)
    assert default.metastore_url == f"sqlite:///{tmp_path.resolve() / 'metastore.db'}"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[]", "must hold a JSON object {...}, not []"),
        ("5", "must hold a JSON object {...}, not 5"),
        ("{", "is not valid JSON"),
        ("[" * 5000, "is not valid JSON"),
        ('{"data_dir": "/x"}', "unknown settings ['data_dir']"),
        ('{"resident_caps": null}', "resident_caps is None"),
        ('{"resident_caps": {}}', "resident_caps lacks the settings"),
        ('{"batch_limits": {"x": 1}}', "batch_limits has unknown settings ['x']"),
        ('{"snapshot_ttl_s": "x"}', "snapshot_ttl_s is 'x'; it must be a whole number"),
        ('{"snapshot_ttl_s": 0}', "snapshot_ttl_s=0 (must be >= 1)"),
        ('{"batch_auth_cache_s": NaN}', "batch_auth_cache_s is nan"),
        ('{"batch_limits": {"max_body_bytes": -1}}', "batch_limits.max_body_bytes=-1"),
    ],
)
def test_bad_control_json_raises_config_error_naming_the_setting(
    tmp_path: Path, content: str, fragment: str
) -> None:
    (tmp_path / "control.json").write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        ControlConfig.from_data_dir(tmp_path)
    assert fragment in str(caught.value) and "control.json" in str(caught.value)


def test_serve_control_reports_a_bad_control_json_as_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "control.json").write_text('{"resident_caps": null}', encoding="utf-8")
    result = CliRunner().invoke(serve_control, ["--data", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "resident_caps is None" in result.output
    assert not (tmp_path / "metastore.db").exists()
