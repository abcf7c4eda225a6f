"""``keys/presign.key``, the directory bucket's presign secret: made once (0600, never visible
half-written), then read as it is; a key under 32 bytes is a ``ConfigError`` naming the file and
the fix, and ``serve dataplane`` reports it as a usage error (exit code 2), not a traceback."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.cli_gateway import serve
from baml_studio.configfile import ConfigError
from baml_studio.gateway import service
from baml_studio.gateway.service import SECRET_BYTES, read_or_create_secret


def test_a_new_key_is_made_once_then_read_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "presign.key"
    made = read_or_create_secret(path)
    assert len(made) == SECRET_BYTES and path.read_bytes() == made
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_or_create_secret(path) == made
    assert sorted(p.name for p in path.parent.iterdir()) == ["presign.key"]  # nothing staged left


@settings(max_examples=60, deadline=None)
@given(key=st.binary(min_size=SECRET_BYTES, max_size=200))
def test_a_key_of_at_least_32_bytes_is_used_as_it_is(key: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "presign.key"
        path.write_bytes(key)
        assert read_or_create_secret(path) == key


@settings(max_examples=60, deadline=None)
@given(key=st.binary(max_size=SECRET_BYTES - 1))
def test_a_short_key_is_a_config_error_naming_the_file_and_the_fix(key: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "presign.key"
        path.write_bytes(key)
        with pytest.raises(ConfigError) as caught:
            read_or_create_secret(path)
        message = str(caught.value)
        assert str(path) in message and f"holds {len(key)} bytes" in message
        assert "restore it" in message and "remove it to have a new one made" in message
        assert path.read_bytes() == key  # left as it was for the operator to restore


def test_a_failed_write_leaves_no_partial_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash or a full disk while the key is written never leaves a short key in place."""
    path = tmp_path / "keys" / "presign.key"

    def disk_full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(service.os, "write", disk_full)
        with pytest.raises(OSError, match="No space left"):
            read_or_create_secret(path)
    assert list(path.parent.iterdir()) == []
    assert len(read_or_create_secret(path)) == SECRET_BYTES


@pytest.mark.parametrize("key", [b"", b"short", os.urandom(SECRET_BYTES - 1)], ids=["0", "5", "31"])
def test_serve_dataplane_refuses_a_short_key_with_exit_code_2(tmp_path: Path, key: bytes) -> None:
    path = tmp_path / "keys" / "presign.key"
    path.parent.mkdir()
    path.write_bytes(key)
    result = CliRunner().invoke(serve, ["dataplane", "--data", str(tmp_path), "--port", "1"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"{path} holds {len(key)} bytes" in result.output
    assert "remove it to have a new one made" in result.output
    assert path.read_bytes() == key


class _KeySet:
    """Stands in for the control plane's ``RemoteKeySet``: records that it was closed."""

    closed = False

    def is_revoked(self, token_id: str) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def test_a_bad_key_closes_the_key_set_open_dataplane_was_given(tmp_path: Path) -> None:
    """``open_dataplane`` owns the key set it is given (the dataplane closes it); when a later
    step fails, the failure closes it, and nothing else was opened (no queue file)."""
    path = tmp_path / "keys" / "presign.key"
    path.parent.mkdir()
    path.write_bytes(b"short")
    config = service.load_dataplane_config(tmp_path, host="127.0.0.1", port=1)
    key_set = _KeySet()
    with pytest.raises(ConfigError, match="holds 5 bytes"):
        service.open_dataplane(config, key_set=key_set)  # type: ignore[arg-type]
    assert key_set.closed
    assert not (tmp_path / "queue").exists()


def test_a_failure_after_the_queue_opened_closes_it_and_the_key_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = service.load_dataplane_config(tmp_path, host="127.0.0.1", port=1)
    opened: list[object] = []
    real_open = service.SqliteQueue.open

    def open_queue(*args: object, **kwargs: object) -> object:
        queue = real_open(*args, **kwargs)  # type: ignore[arg-type]
        opened.append(queue)
        return queue

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(service.SqliteQueue, "open", open_queue)
    monkeypatch.setattr(service, "DirectoryBucket", broken)
    key_set = _KeySet()
    with pytest.raises(OSError, match="No space left"):
        service.open_dataplane(config, key_set=key_set)  # type: ignore[arg-type]
    assert key_set.closed
    assert len(opened) == 1
    with pytest.raises(Exception, match="closed"):
        opened[0].approximate_count()  # type: ignore[attr-defined]
