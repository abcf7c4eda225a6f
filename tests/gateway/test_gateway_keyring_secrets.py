"""An ``HS256`` key ring secret is at least 32 bytes (RFC 7518 §3.2): a ring holding a shorter
one, empty included, is refused with ``KeyringError`` naming the key, however it is built (from
the key file, in code, by rotation), while every ring ``tokens mint`` / ``rotate`` make loads."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.cli_gateway import EXIT_UNAVAILABLE, serve, tokens
from baml_studio.gateway.errors import KeyringError
from baml_studio.gateway.tokens import MIN_SECRET_BYTES, KeyRing, KeyRingFile, SigningKey

EDDSA = SigningKey.generate("EdDSA", "k_ed")


def _ring_json(secret: bytes, kid: str = "k_short") -> str:
    return _ring_with([SigningKey(kid, "HS256", secret)], kid)


@settings(max_examples=200, deadline=None)
@given(secret=st.binary(max_size=3 * MIN_SECRET_BYTES))
def test_an_hs256_secret_loads_only_with_at_least_32_bytes(secret: bytes) -> None:
    if len(secret) >= MIN_SECRET_BYTES:
        ring = KeyRing.from_json(_ring_json(secret))
        assert ring.active_key.material == secret
        assert KeyRing.from_json(ring.to_json()) == ring
        return
    with pytest.raises(KeyringError) as caught:
        KeyRing.from_json(_ring_json(secret))
    message = caught.value.message
    assert "'k_short'" in message and f"has {len(secret)} bytes" in message
    shown = base64.b64encode(secret).decode()
    assert len(secret) < 6 or shown not in message  # the secret is never shown (6 bytes: 8 chars)


@settings(max_examples=100, deadline=None)
@given(
    length=st.integers(0, MIN_SECRET_BYTES - 1),
    kid=st.text(min_size=1, max_size=20).filter(lambda kid: kid not in ("k_good", "k_ed")),
    position=st.integers(0, 2),
)
def test_a_short_secret_among_good_keys_is_refused_naming_its_key(
    length: int, kid: str, position: int
) -> None:
    good = SigningKey.generate("HS256", "k_good")
    keys = [good, EDDSA]
    keys.insert(position, SigningKey(kid, "HS256", b"s" * length))
    with pytest.raises(KeyringError) as built:
        KeyRing(tuple(keys), "k_good")
    with pytest.raises(KeyringError) as loaded:
        KeyRing.from_json(_ring_with(keys, "k_good"))
    for caught in (built, loaded):
        assert f"key {kid!r}: its HS256 secret has {length} bytes" in caught.value.message


def _ring_with(keys: list[SigningKey], active: str) -> str:
    """The key file text of a ring holding ``keys``, which ``KeyRing`` itself would refuse."""
    entries: list[dict[str, str]] = []
    for key in keys:
        if key.alg == "HS256":
            secret = base64.b64encode(key.material).decode("ascii")
            entries.append({"kid": key.kid, "alg": "HS256", "secret": secret})
        else:
            entries.append({"kid": key.kid, "alg": "EdDSA", "private_key": key.material.decode()})
    return json.dumps({"active": active, "keys": entries})


def test_rings_that_generate_and_rotate_make_load() -> None:
    ring = KeyRing.generate("HS256").rotated().rotated("EdDSA").rotated("HS256")
    assert [len(k.material) for k in ring.keys if k.alg == "HS256"] == [MIN_SECRET_BYTES] * 3
    assert KeyRing.from_json(ring.to_json()) == ring


def _short_ring_dir(tmp_path: Path) -> tuple[Path, str]:
    keys = tmp_path / "keys" / "publisher-keys.json"
    keys.parent.mkdir(parents=True)
    text = _ring_json(b"x" * 7)
    keys.write_text(text, encoding="utf-8")
    return keys, text


def test_the_key_file_is_refused_naming_file_and_key_and_left_as_it_was(tmp_path: Path) -> None:
    keys, text = _short_ring_dir(tmp_path)
    with pytest.raises(KeyringError) as caught:
        KeyRingFile(keys).load()
    assert str(keys) in caught.value.message and "'k_short'" in caught.value.message
    assert keys.read_text(encoding="utf-8") == text


def test_tokens_mint_rotate_and_serve_dataplane_report_a_short_secret(tmp_path: Path) -> None:
    keys, text = _short_ring_dir(tmp_path)
    scope = ["--tenant", "t", "--project", "p", "--environment", "e"]
    for group, args in [
        (tokens, ["mint", "--data", str(tmp_path), *scope]),
        (tokens, ["rotate", "--data", str(tmp_path)]),
        (serve, ["dataplane", "--data", str(tmp_path), "--port", "1"]),
    ]:
        result = CliRunner().invoke(group, args)
        assert result.exit_code == EXIT_UNAVAILABLE, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "'k_short': its HS256 secret has 7 bytes" in result.output
        assert keys.read_text(encoding="utf-8") == text
