"""Publisher tokens: JWTs signed by a control-plane key, the only source of upload scope.

Claims: ``tenant``, ``project``, ``environment`` (one environment), ``kind`` (``"publisher"``),
``iat``, ``exp`` and ``kid``; the JWT header carries the same ``kid`` and ``alg``. A token
verifies when its ``kid`` names a key in the :class:`KeyRing`, the signature checks with that
key's algorithm (``HS256`` with a shared secret, or ``EdDSA`` with an Ed25519 key), ``exp`` has
not passed (with a small leeway) and ``kind`` is ``publisher``.

Rotation: :meth:`KeyRing.rotated` adds a new key and makes it the one that mints; tokens of the
old key keep verifying until :meth:`KeyRing.without` removes it, after which they get 401.

A local key ring file (``publisher-keys.json``, mode 0600) stands in for the control plane's
key by default: ``{"active": kid, "keys": [{"kid", "alg", "secret" | "private_key"}]}`` with the
secret base64 (at least 32 bytes; a ring with a shorter one is refused) and the Ed25519 private
key PEM.

Verification only needs a :class:`KeySource`: anything whose ``get(kid)`` returns a
:class:`VerifyingKey` (``alg`` and ``verifying_material()``). A :class:`KeyRing` is one; so is
the control plane's public key set fetched by the data plane
(:class:`baml_studio.control.identity_remote.RemoteKeySet`), whose entries are
:class:`PublicKey`. Tokens issued by the control plane also carry ``jti`` (the token id); when the
verifier has an ``is_revoked`` callback, a token whose ``jti`` it reports gets 401
``token_revoked``. Tokens without ``jti`` (``baml-studio tokens mint``) are never revoked.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

import jwt

from baml_studio.configfile import show
from baml_studio.gateway.config import Scope
from baml_studio.gateway.errors import Forbidden, KeyringError, Unauthenticated
from baml_studio.jsontext import parse_json

PUBLISHER_KIND = "publisher"
Algorithm = Literal["HS256", "EdDSA"]
ALGORITHMS: tuple[Algorithm, ...] = ("HS256", "EdDSA")
MIN_SECRET_BYTES = 32
MAX_TTL_SECONDS = 366 * 24 * 3600
_CLAIMS = ("tenant", "project", "environment", "kind", "exp", "kid")
ED25519_PUBLIC_BYTES = 32


class VerifyingKey(Protocol):
    """What verification needs of a key: its id, algorithm and public (or shared) material."""

    @property
    def kid(self) -> str: ...

    @property
    def alg(self) -> str: ...

    def verifying_material(self) -> Any: ...


class KeySource(Protocol):
    """Where a verifier finds keys by id: a :class:`KeyRing`, or a fetched public key set."""

    def get(self, kid: str) -> VerifyingKey | None: ...


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One control-plane key."""

    kid: str
    """Key id, carried in every token it signs."""

    alg: Algorithm
    """``HS256`` (``material`` is the secret) or ``EdDSA`` (``material`` is a PEM private key)."""

    material: bytes
    """Secret bytes or PEM; keep out of logs."""

    def signing_material(self) -> Any:
        if self.alg == "HS256":
            return self.material
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        return load_pem_private_key(self.material, password=None)

    def verifying_material(self) -> Any:
        if self.alg == "HS256":
            return self.material
        return self.signing_material().public_key()

    @classmethod
    def generate(cls, alg: Algorithm = "HS256", kid: str | None = None) -> SigningKey:
        key_id = kid or f"k_{secrets.token_hex(8)}"
        if alg == "HS256":
            return cls(key_id, alg, secrets.token_bytes(MIN_SECRET_BYTES))
        if alg != "EdDSA":
            raise ValueError(f"algorithm {alg!r} is not one of {ALGORITHMS}")
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cls(key_id, alg, pem)


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A verify-only Ed25519 key: one entry of a JWKS (RFC 7517, RFC 8037 ``OKP``)."""

    kid: str
    raw: bytes
    """The 32-byte Ed25519 public key."""

    alg: Literal["EdDSA"] = "EdDSA"

    def __post_init__(self) -> None:
        if not self.kid:
            raise ValueError("a public key needs a non-empty kid")
        if self.alg != "EdDSA" or len(self.raw) != ED25519_PUBLIC_BYTES:
            raise ValueError(
                f"key {self.kid!r}: only EdDSA keys of {ED25519_PUBLIC_BYTES} bytes are "
                f"public keys (alg {self.alg!r}, {len(self.raw)} bytes)"
            )

    def verifying_material(self) -> Any:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        return Ed25519PublicKey.from_public_bytes(self.raw)

    @classmethod
    def of(cls, key: SigningKey) -> PublicKey:
        """The public half of an ``EdDSA`` signing key (``ValueError`` for a shared secret)."""
        if key.alg != "EdDSA":
            raise ValueError(f"key {key.kid!r} is {key.alg}: a shared secret has no public half")
        from cryptography.hazmat.primitives import serialization

        raw = key.verifying_material().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return cls(key.kid, raw)

    def to_jwk(self) -> dict[str, str]:
        x = base64.urlsafe_b64encode(self.raw).rstrip(b"=").decode("ascii")
        return {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": x,
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        }

    @classmethod
    def from_jwk(cls, entry: Mapping[str, Any]) -> PublicKey:
        """From one JWK; ``ValueError`` unless it is an Ed25519 signature key with a ``kid``."""
        shape = (
            entry.get("kty"),
            entry.get("crv"),
            entry.get("alg", "EdDSA"),
            entry.get("use", "sig"),
        )
        if shape != ("OKP", "Ed25519", "EdDSA", "sig"):
            raise ValueError(f"JWK {entry.get('kid')!r} is {shape}, not an Ed25519 signature key")
        kid, x = entry.get("kid"), entry.get("x")
        if not isinstance(kid, str) or not isinstance(x, str):
            raise ValueError(f"JWK {kid!r} needs string 'kid' and 'x'")
        try:
            raw = base64.urlsafe_b64decode(x + "=" * (-len(x) % 4))
        except ValueError as exc:
            raise ValueError(f"JWK {kid!r}: 'x' is not base64url: {exc}") from exc
        return cls(kid, raw)


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The keys tokens may be signed with; ``active`` mints."""

    keys: tuple[SigningKey, ...]
    active: str

    def __post_init__(self) -> None:
        """``KeyringError`` for an ``HS256`` secret under :data:`MIN_SECRET_BYTES` (RFC 7518
        §3.2: at least the hash's size), ``ValueError`` for repeated ids or a missing active
        key."""
        for key in self.keys:
            if key.alg == "HS256" and len(key.material) < MIN_SECRET_BYTES:
                raise KeyringError(
                    f"key {key.kid!r}: its HS256 secret has {len(key.material)} bytes, fewer "
                    f"than the {MIN_SECRET_BYTES} a key needs; give it a secret of at least "
                    f"{MIN_SECRET_BYTES} random bytes (base64), or remove the key from the ring "
                    "(tokens it signed then get 401)"
                )
        kids = [key.kid for key in self.keys]
        if len(set(kids)) != len(kids):
            raise ValueError(f"duplicate key ids in {kids}")
        if self.active not in kids:
            raise ValueError(f"active key {self.active!r} is not in the ring {kids}")

    def get(self, kid: str) -> SigningKey | None:
        return next((key for key in self.keys if key.kid == kid), None)

    @property
    def active_key(self) -> SigningKey:
        key = self.get(self.active)
        if key is None:  # guarded by __post_init__; kept for the type checker
            raise KeyringError(f"active key {self.active!r} missing")
        return key

    @classmethod
    def generate(cls, alg: Algorithm = "HS256") -> KeyRing:
        key = SigningKey.generate(alg)
        return cls((key,), key.kid)

    def rotated(self, alg: Algorithm | None = None) -> KeyRing:
        """A ring with a new active key; the old keys still verify."""
        key = SigningKey.generate(alg or self.active_key.alg)
        return replace(self, keys=(*self.keys, key), active=key.kid)

    def without(self, kid: str) -> KeyRing:
        """The ring without key ``kid`` (tokens it signed stop verifying); not the active key."""
        if kid == self.active:
            raise ValueError(f"key {kid!r} is active; rotate first, then remove it")
        if self.get(kid) is None:
            raise ValueError(f"no key {kid!r} in the ring {[k.kid for k in self.keys]}")
        return replace(self, keys=tuple(key for key in self.keys if key.kid != kid))

    def to_json(self) -> str:
        entries = []
        for key in self.keys:
            entry: dict[str, str] = {"kid": key.kid, "alg": key.alg}
            if key.alg == "HS256":
                entry["secret"] = base64.b64encode(key.material).decode("ascii")
            else:
                entry["private_key"] = key.material.decode("ascii")
            entries.append(entry)
        return json.dumps({"active": self.active, "keys": entries}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> KeyRing:
        """The ring :meth:`to_json` wrote. Anything else (not JSON, a missing or mistyped
        field, a secret that is not base64 or is under 32 bytes, a private key that is not an
        Ed25519 PEM, repeated key ids, an ``active`` key not in the ring) raises
        ``KeyringError`` naming the entry."""
        raw = parse_json(text, lambda reason: KeyringError(f"the key ring is not JSON ({reason})"))
        if not isinstance(raw, dict) or not isinstance(raw.get("keys"), list):
            raise KeyringError(
                'a key ring is {"active": kid, "keys": [{"kid", "alg", "secret" | '
                f'"private_key"}}, ...]}}, not {show(raw)}'
            )
        active = raw.get("active")
        if not isinstance(active, str):
            raise KeyringError(f"the key ring's active key id is {show(active)}, not a string")
        keys = tuple(_signing_key(index, entry) for index, entry in enumerate(raw["keys"]))
        try:
            return cls(keys, active)
        except ValueError as exc:
            raise KeyringError(f"the key ring is inconsistent: {exc}") from exc


def _signing_key(index: int, entry: object) -> SigningKey:
    """Entry ``index`` of a key ring file, checked as far as loading its material."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if not isinstance(entry, dict):
        raise KeyringError(f"key ring entry {index} is {show(entry)}, not a JSON object")
    kid, alg = entry.get("kid"), entry.get("alg")
    if not isinstance(kid, str) or not kid:
        raise KeyringError(f"key ring entry {index} has kid {show(kid)}; give a non-empty string")
    field = "secret" if alg == "HS256" else "private_key" if alg == "EdDSA" else None
    if field is None:
        raise KeyringError(f"key {kid!r}: algorithm {show(alg)} is not one of {ALGORITHMS}")
    text = entry.get(field)
    if not isinstance(text, str):
        raise KeyringError(f"key {kid!r} ({alg}) needs {field!r} as a string")
    try:
        if alg == "HS256":
            return SigningKey(kid, "HS256", base64.b64decode(text, validate=True))
        key = SigningKey(kid, "EdDSA", text.encode("ascii"))
        if not isinstance(key.signing_material(), Ed25519PrivateKey):
            raise KeyringError(f"key {kid!r}: private_key is not an Ed25519 key")
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        # binascii.Error and UnicodeEncodeError are ValueErrors; a PEM that does not load
        # raises ValueError, or TypeError when it is encrypted.
        raise KeyringError(f"key {kid!r}: its {field} does not load ({exc})") from exc
    return key


class KeyRingFile:
    """A key ring on disk, re-read when the file changes (so rotation needs no restart)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._ring: KeyRing | None = None

    def load(self) -> KeyRing:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if self._ring is None or stamp != self._stamp:
                self._ring = KeyRing.from_json(self.path.read_text("utf-8"))
                self._stamp = stamp
        except FileNotFoundError as exc:
            raise KeyringError(
                f"no key file at {self.path}; a gateway's is created by "
                "'baml-studio tokens mint --data DIR …', a control plane's on first start"
            ) from exc
        except KeyringError as exc:
            raise KeyringError(f"key file {self.path}: {exc}") from exc
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise KeyringError(f"key file {self.path} is unreadable: {exc}") from exc
        return self._ring

    def save(self, ring: KeyRing) -> None:
        """Write atomically (temp file, fsync, rename, fsync directory), mode 0600."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, ring.to_json().encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def load_or_create(self, alg: Algorithm = "HS256") -> KeyRing:
        if not self.path.exists():
            self.save(KeyRing.generate(alg))
        return self.load()


def mint_publisher_token(
    ring: KeyRing, scope: Scope, ttl_seconds: int, *, now: float | None = None
) -> str:
    """A publisher token for ``scope`` signed by the ring's active key, valid ``ttl_seconds``."""
    if not 1 <= ttl_seconds <= MAX_TTL_SECONDS:
        raise ValueError(f"ttl_seconds {ttl_seconds} must be 1..{MAX_TTL_SECONDS}")
    issued = int(time.time() if now is None else now)
    key = ring.active_key
    claims = {
        **scope.as_dict(),
        "kind": PUBLISHER_KIND,
        "iat": issued,
        "exp": issued + ttl_seconds,
        "kid": key.kid,
    }
    return jwt.encode(claims, key.signing_material(), algorithm=key.alg, headers={"kid": key.kid})


@dataclass(frozen=True, slots=True)
class PublisherIdentity:
    """What a verified publisher token grants."""

    scope: Scope
    kid: str
    expires_at: int
    """``exp``, Unix seconds."""

    token_id: str | None = None
    """``jti`` of a control-plane-issued token; ``None`` for a locally minted one."""


class PublisherTokenVerifier:
    """Verifies bearer tokens against the key source ``keys()`` returns at call time.

    ``is_revoked(jti)`` (optional) is asked about every token that carries a ``jti``; it may
    raise a transient error (503) when it cannot tell.
    """

    def __init__(
        self,
        keys: Callable[[], KeySource],
        *,
        leeway_seconds: int = 5,
        is_revoked: Callable[[str], bool] | None = None,
    ) -> None:
        self._keys = keys
        self._leeway = leeway_seconds
        self._is_revoked = is_revoked

    def verify(self, token: str) -> PublisherIdentity:
        """The identity, or ``Unauthenticated`` (401) / ``Forbidden`` (403)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"the bearer token is not a JWT: {exc}") from exc
        kid = header.get("kid")
        key = self._keys().get(kid) if isinstance(kid, str) else None
        if key is None:
            raise Unauthenticated(
                "the token's signing key is unknown (rotated out?); get a new publisher token",
                code="unknown_signing_key",
            )
        if key.alg not in ALGORITHMS:
            raise Unauthenticated(
                f"key {key.kid!r} has algorithm {key.alg!r}, not one of {ALGORITHMS}"
            )
        claims = self._decode(token, key)
        if claims.get("kind") != PUBLISHER_KIND:
            raise Forbidden(
                f"token kind {claims.get('kind')!r} cannot upload; use a publisher token",
                code="wrong_token_kind",
            )
        if claims.get("kid") != kid:
            raise Unauthenticated("the token's kid claim differs from its header")
        try:
            scope = Scope(claims["tenant"], claims["project"], claims["environment"])
        except ValueError as exc:
            raise Unauthenticated(f"the token's scope claims are invalid: {exc}") from exc
        token_id = claims.get("jti")
        if token_id is not None:
            if not isinstance(token_id, str) or not token_id:
                raise Unauthenticated("the token's jti claim is not a token id")
            if self._is_revoked is not None and self._is_revoked(token_id):
                raise Unauthenticated(
                    f"publisher token {token_id} has been revoked; get a new one",
                    code="token_revoked",
                )
        return PublisherIdentity(scope, key.kid, int(claims["exp"]), token_id)

    def _decode(self, token: str, key: VerifyingKey) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.verifying_material(),
                algorithms=[key.alg],
                leeway=self._leeway,
                options={"require": list(_CLAIMS), "verify_iat": False},
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthenticated(
                "the publisher token has expired; get a new one", code="token_expired"
            ) from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"the publisher token is invalid: {exc}") from exc
        return claims
