"""Control-plane identity: the Ed25519 key ring, tokens of three kinds, JWKS and revocations.

Keys: :class:`ControlKeys` keeps the ring in ``<DATA>/control-keys.json`` (a
:class:`~baml_studio.gateway.tokens.KeyRingFile`, mode 0600), created on first use and always
``EdDSA``: a shared secret could not be published, so an ``HS256`` key makes the ring refuse to
load. Rotation adds a new active key; the old keys keep verifying until retired.
:func:`jwks_document` publishes the public halves (RFC 7517/8037), never a secret.

Tokens are JWTs (header ``alg: EdDSA``, ``kid``). Every kind carries ``kind``, ``tenant``,
``jti``, ``iat``, ``exp`` and ``kid``; besides those::

    kind        claims                                          lifetime: max (default)
    user        project, environments (list), erasure (bool)    24 h (8 h)
    publisher   project, environment                            366 d (90 d)
    workload    deployment, cell                                1 h (15 min)

``jti`` is the token id, ``tok_`` and 26 Crockford base32 characters (a ULID: sortable by issue
time). Publisher claims are exactly those the gateway's
:class:`~baml_studio.gateway.tokens.PublisherTokenVerifier` reads, so it accepts them. The
:class:`TokenRegistry` (the metastore) keeps a :class:`~baml_studio.control.model.TokenRecord`
per token with the SHA-256 of its text, never the text.

:meth:`TokenVerifier.verify` refuses a token with :class:`~baml_studio.apierrors.Unauthenticated`
(401) ``invalid_token`` (not a JWT, bad signature, missing or malformed claims, no registry record
or a different hash), ``unknown_signing_key``, ``token_expired`` or ``token_revoked``, and with
:class:`~baml_studio.apierrors.Forbidden` (403) ``wrong_token_kind``.

Rotation of a token (:meth:`TokenIssuer.rotate`) issues a token with the same claims and
``replaces`` set; the old token stays valid until it is revoked. The intended grace period is the
customer's redeploy: install the new token everywhere, then ``admin tokens revoke`` the old one.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol, overload, runtime_checkable

import jwt

from baml_studio.apierrors import BadRequest, Conflict, Forbidden, NotFound, Unauthenticated
from baml_studio.control.model import TokenKind, TokenRecord
from baml_studio.gateway.config import Scope, validate_scope_part
from baml_studio.gateway.errors import KeyringError
from baml_studio.gateway.tokens import (
    MAX_TTL_SECONDS,
    KeyRing,
    KeyRingFile,
    KeySource,
    PublicKey,
    PublisherIdentity,
    VerifyingKey,
)

CONTROL_KEYS_FILE = "control-keys.json"
ALGORITHM: Literal["EdDSA"] = "EdDSA"
TOKEN_ID = re.compile(r"tok_[0-9A-HJKMNP-TV-Z]{26}")
_WHITESPACE = re.compile(r"\s")
"""What a bearer token may not hold: the class is exactly ``str.isspace`` (the same set on every
code point), matched in one C scan of the token."""
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
DEFAULT_TTL_S = {TokenKind.USER: 8 * 3600, TokenKind.PUBLISHER: 90 * 86400, TokenKind.WORKLOAD: 900}
MAX_TTL_S = {
    TokenKind.USER: 24 * 3600,
    TokenKind.PUBLISHER: MAX_TTL_SECONDS,
    TokenKind.WORKLOAD: 3600,
}
_COMMON = ("kind", "tenant", "jti", "iat", "exp", "kid")
TokenState = Literal["active", "revoked", "unknown"]


def new_token_id(now: float) -> str:
    """``tok_`` and a ULID: 48 bits of milliseconds, 80 random bits, Crockford base32."""
    value = (int(now * 1000) & (2**48 - 1)) << 80 | secrets.randbits(80)
    chars = [_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(26))]
    return "tok_" + "".join(chars)


def token_hash(token: str) -> str:
    """What the registry keeps of a token: SHA-256 of its text, lowercase hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# --- keys ----------------------------------------------------------------------------------------


class ControlKeys:
    """The control plane's signing key ring in one file: created on first use, ``EdDSA`` only.

    Rotation and retirement read, change and rewrite the file (atomically); run them from one
    admin at a time. Readers see the change on their next call (the file is re-read on change).
    """

    def __init__(self, path: Path) -> None:
        self._file = KeyRingFile(path)

    @classmethod
    def in_dir(cls, data_dir: Path) -> ControlKeys:
        return cls(data_dir / CONTROL_KEYS_FILE)

    @property
    def path(self) -> Path:
        return self._file.path

    def ring(self) -> KeyRing:
        """The current ring; ``KeyringError`` (500) if unreadable or holding a non-EdDSA key."""
        ring = self._file.load_or_create(ALGORITHM)
        shared = [key.kid for key in ring.keys if key.alg != ALGORITHM]
        if shared:
            raise KeyringError(
                f"control key file {self.path} holds non-{ALGORITHM} keys {shared}; a control "
                f"ring signs only with Ed25519 so its public keys can be published. Retire them."
            )
        return ring

    def rotate(self) -> KeyRing:
        """Add a new active Ed25519 key; tokens of the old keys keep verifying."""
        ring = self.ring().rotated(ALGORITHM)
        self._file.save(ring)
        return ring

    def retire(self, kid: str) -> KeyRing:
        """Remove key ``kid`` (``ValueError`` if it is active or unknown); its tokens get 401."""
        ring = self.ring().without(kid)
        self._file.save(ring)
        return ring


def jwks_document(ring: KeyRing) -> dict[str, Any]:
    """The public key set of ``ring`` (``GET /.well-known/jwks.json``): Ed25519 keys only."""
    return {"keys": [PublicKey.of(key).to_jwk() for key in ring.keys if key.alg == ALGORITHM]}


# --- the registry port ---------------------------------------------------------------------------


class TokenRegistry(Protocol):
    """Issued tokens, by id (the metastore). Holds hashes, never token text."""

    def record_token(self, record: TokenRecord) -> None:
        """Store a new token's record; ``Conflict`` if the id exists."""

    def token_state(self, token_id: str, token_hash: str) -> TokenState:
        """``active`` or ``revoked`` when a record has this id and hash; else ``unknown``.

        Expiry is not considered: the verifier checks ``exp``."""

    def revoke_token(self, token_id: str) -> bool:
        """Mark the token revoked now: true if it was active, false if it was already revoked
        (its first ``revoked_at`` is kept). An unknown id is an error of the registry's tree
        (the metastore's ``NotFoundInMetastore``, :class:`MemoryTokenRegistry`'s ``NotFound``)."""

    def revoked_token_ids(self) -> list[str]:
        """Ids of revoked tokens; those already expired may be left out."""

    def get_token(self, token_id: str) -> TokenRecord | None:
        """The record, revoked or not; ``None`` if unknown."""


@runtime_checkable
class TokenLister(Protocol):
    """A registry that can also list its records (for ``admin tokens list``)."""

    def list_tokens(
        self, tenant_id: str | None = None, include_revoked: bool = False
    ) -> list[TokenRecord]:
        """Records of ``tenant_id`` (every tenant if ``None``), oldest first; revoked ones only
        with ``include_revoked``."""


class MemoryTokenRegistry:
    """An in-memory :class:`TokenRegistry` for tests; set ``fail`` to make every call raise it."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._records: dict[str, TokenRecord] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self.fail: Exception | None = None

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    def record_token(self, record: TokenRecord) -> None:
        self._check()
        with self._lock:
            if record.token_id in self._records:
                raise Conflict(f"token {record.token_id} is already recorded")
            self._records[record.token_id] = record

    def token_state(self, token_id: str, token_hash: str) -> TokenState:
        self._check()
        record = self._records.get(token_id)
        if record is None or not secrets.compare_digest(record.token_hash, token_hash):
            return "unknown"
        return "active" if record.revoked_at is None else "revoked"

    def revoke_token(self, token_id: str) -> bool:
        self._check()
        with self._lock:
            record = self._records.get(token_id)
            if record is None:
                raise NotFound(f"no token {token_id!r}")
            if record.revoked_at is not None:
                return False
            self._records[token_id] = replace(record, revoked_at=int(self._clock()))
            return True

    def revoked_token_ids(self) -> list[str]:
        self._check()
        now = self._clock()
        return sorted(
            r.token_id
            for r in self._records.values()
            if r.revoked_at is not None and r.expires_at > now
        )

    def get_token(self, token_id: str) -> TokenRecord | None:
        self._check()
        return self._records.get(token_id)

    def list_tokens(
        self, tenant_id: str | None = None, include_revoked: bool = False
    ) -> list[TokenRecord]:
        self._check()
        records = [
            r
            for r in self._records.values()
            if tenant_id in (None, r.tenant_id) and (include_revoked or r.revoked_at is None)
        ]
        return sorted(records, key=lambda r: (r.issued_at, r.token_id))


def revocations_document(registry: TokenRegistry) -> dict[str, list[str]]:
    """``GET /token-revocations``: ``{"revoked": [token ids]}``."""
    return {"revoked": sorted(registry.revoked_token_ids())}


# --- issuing -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A freshly signed token and the record the registry now holds for it."""

    token: str
    """The JWT; shown once, never stored."""

    record: TokenRecord

    @property
    def token_id(self) -> str:
        return self.record.token_id

    @property
    def expires_at(self) -> int:
        return self.record.expires_at

    def as_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "token_id": self.token_id,
            "kind": self.record.kind.value,
            "expires_at": self.expires_at,
            "replaces": self.record.replaces,
        }


def _bad(message: str) -> BadRequest:
    return BadRequest(message, code="invalid_token_request")


def _ids(**ids: object) -> None:
    for name, value in ids.items():
        try:
            validate_scope_part(name, value)
        except ValueError as exc:
            raise _bad(str(exc)) from exc


class TokenIssuer:
    """Signs tokens with the active key of ``keys()`` and records them in ``registry``."""

    def __init__(
        self,
        keys: Callable[[], KeyRing],
        registry: TokenRegistry,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._keys = keys
        self._registry = registry
        self._clock = clock

    def issue_user(
        self,
        tenant: str,
        project: str,
        environments: Sequence[str],
        erasure: bool = False,
        ttl_s: int = DEFAULT_TTL_S[TokenKind.USER],
    ) -> IssuedToken:
        if isinstance(environments, str) or not environments:
            raise _bad(f"environments must be a non-empty list of ids, got {environments!r}")
        _ids(
            tenant=tenant,
            project=project,
            **{f"environments[{i}]": e for i, e in enumerate(environments)},
        )
        unique = tuple(dict.fromkeys(environments))
        template = _template(TokenKind.USER, tenant, project_id=project, environments=unique)
        return self._issue(replace(template, erasure=bool(erasure)), ttl_s)

    def issue_publisher(
        self, scope: Scope, ttl_s: int = DEFAULT_TTL_S[TokenKind.PUBLISHER]
    ) -> IssuedToken:
        template = _template(
            TokenKind.PUBLISHER,
            scope.tenant,
            project_id=scope.project,
            environments=(scope.environment,),
        )
        return self._issue(template, ttl_s)

    def issue_workload(
        self,
        tenant: str,
        deployment: str,
        cell: str,
        ttl_s: int = DEFAULT_TTL_S[TokenKind.WORKLOAD],
    ) -> IssuedToken:
        _ids(tenant=tenant, deployment=deployment, cell=cell)
        template = _template(TokenKind.WORKLOAD, tenant, deployment_id=deployment, cell=cell)
        return self._issue(template, ttl_s)

    def rotate(self, token_id: str, ttl_s: int | None = None) -> IssuedToken:
        """A token with the same claims, ``replaces=token_id``; the old one stays valid until
        revoked. ``ttl_s`` defaults to the old token's lifetime. A revoked token gets 409."""
        old = self._registry.get_token(token_id)
        if old is None:
            raise NotFound(f"no token {token_id!r}; list them with 'admin tokens list'")
        if old.revoked_at is not None:
            raise Conflict(f"token {token_id} is revoked; issue a new one", code="token_revoked")
        if ttl_s is None:
            ttl_s = min(old.expires_at - old.issued_at, MAX_TTL_S[old.kind])
        return self._issue(replace(old, revoked_at=None, replaces=token_id), ttl_s)

    def _issue(self, template: TokenRecord, ttl_s: int) -> IssuedToken:
        limit = MAX_TTL_S[template.kind]
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or not 1 <= ttl_s <= limit:
            raise _bad(
                f"ttl_s {ttl_s!r} must be 1..{limit} seconds for a {template.kind.value} token"
            )
        key = self._keys().active_key
        if key.alg != ALGORITHM:
            raise KeyringError(
                f"active key {key.kid!r} is {key.alg}; control tokens are {ALGORITHM}"
            )
        clock = self._clock()
        now = int(clock)
        record = replace(
            template,
            token_id=new_token_id(clock),
            issued_at=now,
            expires_at=now + ttl_s,
            token_hash="",
        )
        claims = {**_claims_of(record), "kid": key.kid}
        token = jwt.encode(
            claims, key.signing_material(), algorithm=ALGORITHM, headers={"kid": key.kid}
        )
        record = replace(record, token_hash=token_hash(token))
        self._registry.record_token(record)
        return IssuedToken(token, record)


def _template(kind: TokenKind, tenant: str, **fields: Any) -> TokenRecord:
    _ids(tenant=tenant)
    return TokenRecord(
        token_id="", kind=kind, tenant_id=tenant, token_hash="", issued_at=0, expires_at=0, **fields
    )


def _claims_of(record: TokenRecord) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "kind": record.kind.value,
        "tenant": record.tenant_id,
        "jti": record.token_id,
        "iat": record.issued_at,
        "exp": record.expires_at,
    }
    if record.kind is TokenKind.USER:
        claims |= {
            "project": record.project_id,
            "environments": list(record.environments),
            "erasure": record.erasure,
        }
    elif record.kind is TokenKind.PUBLISHER:
        claims |= {"project": record.project_id, "environment": record.environments[0]}
    else:
        claims |= {"deployment": record.deployment_id, "cell": record.cell}
    return claims


# --- verifying -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserIdentity:
    """What a verified user token grants."""

    tenant: str
    project: str
    environments: tuple[str, ...]
    erasure: bool
    """May call ``POST /v1/erasures``."""

    token_id: str
    kid: str
    issued_at: int
    expires_at: int

    def scope(self, environment: str) -> Scope:
        """The scope of one of the token's environments; 403 for any other."""
        if environment not in self.environments:
            raise Forbidden(
                f"the token does not grant environment {environment!r}; it grants "
                f"{list(self.environments)}",
                code="scope_mismatch",
            )
        return Scope(self.tenant, self.project, environment)

    def grants(self, scope: Scope) -> bool:
        """Whether ``scope`` is the token's tenant and project and one of its environments."""
        return (
            scope.tenant == self.tenant
            and scope.project == self.project
            and scope.environment in self.environments
        )


@dataclass(frozen=True, slots=True)
class WorkloadIdentity:
    """What a verified workload token grants: a deployment in a cell, for one tenant."""

    tenant: str
    deployment: str
    cell: str
    token_id: str
    kid: str
    issued_at: int
    expires_at: int


Identity = UserIdentity | PublisherIdentity | WorkloadIdentity
"""What :meth:`TokenVerifier.verify` returns, by kind."""


def _invalid(message: str) -> Unauthenticated:
    return Unauthenticated(message, code="invalid_token")


class TokenVerifier:
    """Verifies control-plane tokens against ``keys()`` and the registry (see the module doc)."""

    def __init__(
        self,
        keys: Callable[[], KeySource],
        registry: TokenRegistry,
        leeway_s: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._keys = keys
        self._registry = registry
        self._leeway = leeway_s
        self._clock = clock

    @overload
    def verify(self, token: str, kind: Literal[TokenKind.USER]) -> UserIdentity: ...
    @overload
    def verify(self, token: str, kind: Literal[TokenKind.PUBLISHER]) -> PublisherIdentity: ...
    @overload
    def verify(self, token: str, kind: Literal[TokenKind.WORKLOAD]) -> WorkloadIdentity: ...
    @overload
    def verify(self, token: str, kind: TokenKind) -> Identity: ...

    def verify(self, token: str, kind: TokenKind) -> Identity:
        """The identity ``token`` proves, if it is a valid token of ``kind``; else 401 / 403."""
        key = self._key_of(token)
        claims = self._decode(token, key)
        token_id = claims["jti"]
        state = self._registry.token_state(token_id, token_hash(token))
        if state == "revoked":
            raise Unauthenticated(f"token {token_id} has been revoked", code="token_revoked")
        if state != "active":
            raise _invalid(f"token {token_id} is not on record (or its text differs)")
        if claims["kind"] != kind.value:
            raise Forbidden(
                f"a {claims['kind']} token cannot be used here; use a {kind.value} token",
                code="wrong_token_kind",
            )
        return _identity(kind, claims, key.kid)

    def _key_of(self, token: str) -> VerifyingKey:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise _invalid(f"the bearer token is not a JWT: {exc}") from exc
        kid = header.get("kid")
        key = self._keys().get(kid) if isinstance(kid, str) else None
        if key is None:
            raise Unauthenticated(
                f"the token's signing key {kid!r} is unknown (retired?); get a new token",
                code="unknown_signing_key",
            )
        if key.alg != ALGORITHM or header.get("alg") != ALGORITHM:
            raise _invalid(f"control tokens are signed with {ALGORITHM}, not {header.get('alg')!r}")
        return key

    def _decode(self, token: str, key: VerifyingKey) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.verifying_material(),
                algorithms=[ALGORITHM],
                options={"require": list(_COMMON), "verify_exp": False, "verify_iat": False},
            )
        except jwt.PyJWTError as exc:
            raise _invalid(f"the token is invalid: {exc}") from exc
        for name in ("iat", "exp"):
            if isinstance(claims[name], bool) or not isinstance(claims[name], int):
                raise _invalid(f"claim {name} must be whole Unix seconds")
        now = self._clock()
        if claims["exp"] <= now - self._leeway:
            raise Unauthenticated("the token has expired; get a new one", code="token_expired")
        if claims["iat"] > now + self._leeway:
            raise _invalid("the token was issued in the future (clock skew?)")
        if claims["kid"] != key.kid:
            raise _invalid("the token's kid claim differs from its header")
        if not isinstance(claims["jti"], str) or not TOKEN_ID.fullmatch(claims["jti"]):
            raise _invalid(f"claim jti {claims['jti']!r} is not a token id")
        if claims["kind"] not in {k.value for k in TokenKind}:
            raise _invalid(
                f"claim kind {claims['kind']!r} is not one of {[k.value for k in TokenKind]}"
            )
        return claims


def _identity(kind: TokenKind, claims: Mapping[str, Any], kid: str) -> Identity:
    token_id, issued_at, expires_at = claims["jti"], claims["iat"], claims["exp"]
    try:
        tenant = validate_scope_part("tenant", claims["tenant"])
        if kind is TokenKind.PUBLISHER:
            scope = Scope(tenant, claims["project"], claims["environment"])
            return PublisherIdentity(scope, kid, expires_at, token_id)
        if kind is TokenKind.USER:
            environments = claims["environments"]
            if not isinstance(environments, list) or not environments:
                raise ValueError(f"environments {environments!r} is not a non-empty list")
            for environment in environments:
                validate_scope_part("environment", environment)
            if not isinstance(claims["erasure"], bool):
                raise ValueError(f"erasure {claims['erasure']!r} is not a boolean")
            return UserIdentity(
                tenant,
                validate_scope_part("project", claims["project"]),
                tuple(environments),
                claims["erasure"],
                token_id,
                kid,
                issued_at,
                expires_at,
            )
        return WorkloadIdentity(
            tenant,
            validate_scope_part("deployment", claims["deployment"]),
            validate_scope_part("cell", claims["cell"]),
            token_id,
            kid,
            issued_at,
            expires_at,
        )
    except KeyError as exc:
        raise _invalid(f"the {kind.value} token lacks claim {exc.args[0]!r}") from exc
    except ValueError as exc:
        raise _invalid(f"the {kind.value} token's claims are invalid: {exc}") from exc


def bearer_token(headers: Mapping[str, str]) -> str:
    """The token of ``Authorization: Bearer <token>`` (any header case); 401 otherwise."""
    value = headers.get("authorization") or headers.get("Authorization")
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or _WHITESPACE.search(token):
        raise Unauthenticated("send 'Authorization: Bearer <token>'", code="missing_token")
    return token
