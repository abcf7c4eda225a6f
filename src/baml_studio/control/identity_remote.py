"""The data plane's copy of the control plane's public keys and revoked token ids.

:class:`RemoteKeySet` fetches ``GET {control_url}/.well-known/jwks.json`` and
``GET {control_url}/token-revocations`` and keeps each for ``ttl_s`` seconds. It is a
:class:`~baml_studio.gateway.tokens.KeySource`, so the gateway verifies publisher tokens with it::

    keys = RemoteKeySet("https://control.example")
    verifier = PublisherTokenVerifier(lambda: keys, is_revoked=keys.is_revoked)

* An unknown ``kid`` makes it fetch the key set again at once (a new key after a rotation), but at
  most once per ``refetch_interval_s``, so a stream of forged kids cannot hammer the control plane.
  Only a key set fetched during the call decides that a ``kid`` is unknown (``None``: 401); when
  none could be fetched (too soon, or the control plane is down) the answer is 503 with
  ``Retry-After``, so a token of a just-rotated key is never refused for good.
* When the control plane is unreachable or answers badly it keeps serving the last good copy and
  logs the URL and the error type (never a token), retrying at most once per
  ``refetch_interval_s``.
* Before the first good copy it cannot tell a good token from a bad one, so it raises
  :class:`~baml_studio.apierrors.DependencyUnavailable` (503, retryable) rather than 401 (which
  would make a publisher stop shipping).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import httpx

from baml_studio.apierrors import DependencyUnavailable
from baml_studio.gateway.tokens import PublicKey
from baml_studio.jsontext import parse_json

log = logging.getLogger(__name__)

JWKS_PATH = "/.well-known/jwks.json"
REVOCATIONS_PATH = "/token-revocations"
DEFAULT_TTL_S = 300.0
DEFAULT_REFETCH_INTERVAL_S = 10.0
DEFAULT_TIMEOUT_S = 5.0
T = TypeVar("T")


class _BadDocument(ValueError):
    """The control plane answered, but not with the document the contract names."""


class _Cached(Generic[T]):
    """One fetched document: refetched when older than ``ttl_s`` or on demand, never more than
    once per ``min_interval_s``; the last good value survives failed fetches."""

    def __init__(
        self,
        url: str,
        fetch: Callable[[str], T],
        ttl_s: float,
        min_interval_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.url = url
        self._fetch = fetch
        self._ttl = ttl_s
        self._min_interval = min_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._fetched_at = 0.0
        self._attempted_at: float | None = None

    def get(self, *, again: bool = False, force: bool = False) -> tuple[T | None, bool]:
        """The value and whether this call fetched it: fetched first if stale or ``again``
        (either at most once per ``min_interval_s``), or if ``force``."""
        with self._lock:
            now = self._clock()
            recent = (
                self._attempted_at is not None and now - self._attempted_at < self._min_interval
            )
            stale = self._value is None or now - self._fetched_at >= self._ttl
            fetched = (force or ((stale or again) and not recent)) and self._refresh(now)
            return self._value, fetched

    def retry_after(self) -> int:
        """Whole seconds until ``again`` may fetch (at least 1)."""
        since = self._clock() - (self._attempted_at or 0.0)
        return max(1, math.ceil(self._min_interval - since))

    def _refresh(self, now: float) -> bool:
        self._attempted_at = now
        try:
            value = self._fetch(self.url)
        except (httpx.HTTPError, ValueError) as exc:  # _BadDocument and bad JSON are ValueErrors
            age = "none yet" if self._value is None else f"{now - self._fetched_at:.0f}s old"
            log.warning(
                "fetching %s failed (%s); serving the last good copy (%s)",
                self.url,
                type(exc).__name__,
                age,
            )
            return False
        self._value = value
        self._fetched_at = now
        return True


class RemoteKeySet:
    """The control plane's public key set and revocation list, cached (see the module doc)."""

    def __init__(
        self,
        control_url: str,
        *,
        client: httpx.Client | None = None,
        ttl_s: float = DEFAULT_TTL_S,
        refetch_interval_s: float = DEFAULT_REFETCH_INTERVAL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not control_url.startswith(("http://", "https://")):
            raise ValueError(f"control_url {control_url!r} must start with http:// or https://")
        base = control_url.rstrip("/")
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout_s)
        self._keys = _Cached(base + JWKS_PATH, self._fetch_keys, ttl_s, refetch_interval_s, clock)
        self._revoked = _Cached(
            base + REVOCATIONS_PATH, self._fetch_revoked, ttl_s, refetch_interval_s, clock
        )

    def get(self, kid: str) -> PublicKey | None:
        """The public key ``kid``; ``None`` if a key set fetched by this call lacks it; 503
        (``DependencyUnavailable``) when no key set could be fetched now to decide."""
        value, fetched = self._keys.get()
        keys = self._present(value, self._keys)
        if kid in keys:
            return keys[kid]
        if not fetched:
            log.info("unknown kid=%s: fetching the key set again", kid)
            value, fetched = self._keys.get(again=True)
            keys = self._present(value, self._keys)
        if fetched:
            return keys.get(kid)
        raise DependencyUnavailable(
            f"signing key {kid!r} is not in the control plane's key set, which cannot be "
            "fetched again yet; retry shortly",
            code="signing_key_pending",
            retry_after=self._keys.retry_after(),
        )

    def is_revoked(self, token_id: str) -> bool:
        """Whether the control plane lists ``token_id`` as revoked; 503 before the list was ever
        fetched."""
        value, _ = self._revoked.get()
        return token_id in self._present(value, self._revoked)

    def refresh(self) -> bool:
        """Fetch both documents now; true if both were fetched (a start-up check)."""
        _, keys = self._keys.get(force=True)
        _, revoked = self._revoked.get(force=True)
        return keys and revoked

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> RemoteKeySet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _present(value: T | None, cached: _Cached[T]) -> T:
        if value is None:
            raise DependencyUnavailable(
                f"{cached.url} has not been fetched yet; retry shortly",
                code="control_plane_unavailable",
                retry_after=cached.retry_after(),
            )
        return value

    def _get_json(self, url: str) -> Any:
        response = self._client.get(url, headers={"Accept": "application/json"})
        if response.status_code != httpx.codes.OK:
            raise _BadDocument(f"HTTP {response.status_code}")
        return parse_json(response.content, _BadDocument)

    def _fetch_keys(self, url: str) -> dict[str, PublicKey]:
        document = self._get_json(url)
        entries = document.get("keys") if isinstance(document, Mapping) else None
        if not isinstance(entries, list):
            raise _BadDocument("no 'keys' list")
        keys: dict[str, PublicKey] = {}
        for entry in entries:
            try:
                key = PublicKey.from_jwk(entry if isinstance(entry, Mapping) else {})
            except ValueError:
                kid = entry.get("kid") if isinstance(entry, Mapping) else None
                log.info("skipping JWK kid=%r: not an Ed25519 signature key", kid)
                continue
            keys[key.kid] = key
        return keys

    def _fetch_revoked(self, url: str) -> frozenset[str]:
        document = self._get_json(url)
        ids = document.get("revoked") if isinstance(document, Mapping) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise _BadDocument("no 'revoked' list of token ids")
        return frozenset(ids)
