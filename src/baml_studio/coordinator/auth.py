"""Boundary user tokens at the coordinator: verified offline, by the control plane's own rules.

Studio, the CLI and agents call the coordinator with ``Authorization: Bearer <user token>``. The
data plane cannot read the control plane's metastore, so :class:`UserTokenAuth` verifies with
the control plane's public key set and revocation list (a
:class:`~baml_studio.control.identity_remote.RemoteKeySet`, as the gateway does for publisher
tokens), through the control plane's own :class:`~baml_studio.control.identity.TokenVerifier`:
same signature, ``kid``, expiry (5 s leeway), ``iat``, ``jti`` and claim checks. Only the
registry question differs, and only in what can be known offline:

* remote (:meth:`UserTokenAuth.remote`, :meth:`UserTokenAuth.open` with a control-plane URL):
  a token is ``revoked`` when its id is on the fetched revocation list (up to the list's cache
  TTL late), else ``active``; the token's hash cannot be compared, but only the control plane's
  private key could have signed it. Before the first fetch the answer is 503 (retryable).
* embedded (:meth:`UserTokenAuth.local`): the keys come from a
  :class:`~baml_studio.control.identity.ControlKeys` ring file in a directory; with the
  metastore as ``registry`` every control-plane check applies (record and hash too), without
  one nothing is ever revoked (tests and single-machine setups).

Refusals (all :class:`~baml_studio.apierrors.ApiError`)::

    401 missing_token        no or a garbled Authorization header   } with WWW-Authenticate
    401 invalid_token, unknown_signing_key, token_expired, token_revoked  } (error_headers)
    403 wrong_token_kind     a publisher or workload token
    403 scope_mismatch       an environment the token does not grant
    400 environment_required no environment named and the token grants several
    403 permission_denied    erasure without the token's erasure permission
    503 control_plane_unavailable, signing_key_pending   (remote keys not fetched yet)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from baml_studio.apierrors import ApiError, BadRequest, Forbidden
from baml_studio.apierrors import error_headers as _error_headers
from baml_studio.control.identity import (
    ControlKeys,
    TokenRegistry,
    TokenState,
    TokenVerifier,
    UserIdentity,
    bearer_token,
)
from baml_studio.control.identity_remote import RemoteKeySet
from baml_studio.control.model import TokenKind, TokenRecord
from baml_studio.gateway.config import Scope
from baml_studio.gateway.tokens import KeySource

log = logging.getLogger(__name__)

REALM = "baml-user"
"""The ``WWW-Authenticate: Bearer realm=…`` of the coordinator's 401 answers."""

DEFAULT_LEEWAY_S = 5


def error_headers(error: ApiError) -> dict[str, str]:
    """``Retry-After`` for transient errors, ``WWW-Authenticate`` (realm :data:`REALM`) for 401."""
    return _error_headers(error, realm=REALM)


class RevocationListRegistry:
    """A read-only :class:`~baml_studio.control.identity.TokenRegistry` over a revocation list.

    ``token_state`` answers ``revoked`` for an id ``is_revoked`` reports and ``active`` for any
    other (the hash is not known offline; the verifier has already checked the signature, the
    claims and that ``jti`` is a token id). It holds no records: ``get_token`` is ``None`` and
    the writing methods raise ``TypeError`` (revoke at the control plane:
    ``baml-studio admin tokens revoke ID``).
    """

    def __init__(self, is_revoked: Callable[[str], bool]) -> None:
        self._is_revoked = is_revoked

    def token_state(self, token_id: str, token_hash: str) -> TokenState:
        return "revoked" if self._is_revoked(token_id) else "active"

    def record_token(self, record: TokenRecord) -> None:
        raise TypeError(f"{type(self).__name__} is read-only; tokens are issued by Boundary")

    def revoke_token(self, token_id: str) -> bool:
        raise TypeError(
            f"{type(self).__name__} is read-only; revoke {token_id} at the control plane "
            "('baml-studio admin tokens revoke')"
        )

    def revoked_token_ids(self) -> list[str]:
        raise TypeError(f"{type(self).__name__} answers per id and cannot list revocations")

    def get_token(self, token_id: str) -> TokenRecord | None:
        return None


def _never_revoked(token_id: str) -> bool:
    return False


class UserTokenAuth:
    """Authenticates user tokens and derives the scope of a request (see the module doc).

    Build it with :meth:`open`, :meth:`remote` or :meth:`local`; :meth:`close` releases a
    :class:`RemoteKeySet` it owns.
    """

    def __init__(
        self,
        keys: Callable[[], KeySource],
        registry: TokenRegistry,
        *,
        leeway_s: int = DEFAULT_LEEWAY_S,
        clock: Callable[[], float] = time.time,
        owned: RemoteKeySet | None = None,
    ) -> None:
        self._verifier = TokenVerifier(keys, registry, leeway_s, clock)
        self._owned = owned

    @classmethod
    def remote(
        cls,
        key_set: RemoteKeySet,
        *,
        leeway_s: int = DEFAULT_LEEWAY_S,
        clock: Callable[[], float] = time.time,
        owned: bool = False,
    ) -> UserTokenAuth:
        """Verify with the control plane's public keys and revocation list in ``key_set``;
        :meth:`close` closes it when ``owned``."""
        return cls(
            lambda: key_set,
            RevocationListRegistry(key_set.is_revoked),
            leeway_s=leeway_s,
            clock=clock,
            owned=key_set if owned else None,
        )

    @classmethod
    def local(
        cls,
        keys_dir: Path,
        registry: TokenRegistry | None = None,
        *,
        leeway_s: int = DEFAULT_LEEWAY_S,
        clock: Callable[[], float] = time.time,
    ) -> UserTokenAuth:
        """Verify with the ring in ``keys_dir/control-keys.json`` (created on first use, as the
        control plane does) and ``registry`` (the metastore: every control-plane check), or, when
        ``None``, with nothing ever revoked."""
        control_keys = ControlKeys.in_dir(keys_dir)
        control_keys.ring()
        return cls(
            control_keys.ring,
            registry if registry is not None else RevocationListRegistry(_never_revoked),
            leeway_s=leeway_s,
            clock=clock,
        )

    @classmethod
    def open(
        cls,
        keys_dir: Path,
        control_plane_url: str | None = None,
        *,
        key_set: RemoteKeySet | None = None,
    ) -> UserTokenAuth:
        """What the coordinator's entry point uses, chosen as the gateway chooses: ``key_set``,
        else a :class:`RemoteKeySet` of ``control_plane_url`` (fetched once now, so an
        unreachable control plane shows in the log at start), else the local ring in
        ``keys_dir``. A key set it is given or builds is closed by :meth:`close`."""
        if key_set is None and control_plane_url is not None:
            key_set = RemoteKeySet(control_plane_url)
            if not key_set.refresh():
                log.warning(
                    "control plane %s did not serve its keys; queries get 503 until it does",
                    control_plane_url,
                )
        if key_set is not None:
            return cls.remote(key_set, owned=True)
        return cls.local(keys_dir)

    def authenticate(self, headers: Mapping[str, str]) -> UserIdentity:
        """The identity of the request's ``Authorization: Bearer`` user token; 401, 403 or 503
        as the module doc lists."""
        return self._verifier.verify(bearer_token(headers), TokenKind.USER)

    @staticmethod
    def scope_for(identity: UserIdentity, environment_id: str | None) -> Scope:
        """The scope a request may read: ``environment_id`` if the token grants it (else 403
        ``scope_mismatch``); when ``None``, the token's only environment (else 400
        ``environment_required`` naming the choices in ``details.environments``)."""
        if environment_id is not None:
            return identity.scope(environment_id)
        if len(identity.environments) == 1:
            return identity.scope(identity.environments[0])
        choices = list(identity.environments)
        raise BadRequest(
            f"the token grants environments {choices}; name one of them in environment_id",
            code="environment_required",
            details={"environments": choices},
        )

    @staticmethod
    def require_erasure(identity: UserIdentity) -> None:
        """403 ``permission_denied`` unless the token carries the erasure permission."""
        if not identity.erasure:
            raise Forbidden(
                f"user token {identity.token_id} lacks the erasure permission; ask an admin "
                "for one issued with 'baml-studio admin tokens issue user --erasure'",
                code="permission_denied",
            )

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> UserTokenAuth:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
