"""Optional mutual TLS for the workload API: uvicorn server settings, an httpx client context.

The control plane serves TLS with its certificate and, given a client CA, requires every client
to present a certificate that CA signed (the handshake fails otherwise, before any request is
read). A data-plane workload presents its certificate with :func:`client_ssl_context`, and still
sends its workload JWT: the certificate says which machine, the token says which deployment,
cell and tenant. Certificate provisioning and rotation belong to the deployment (files on disk;
uvicorn reads them at start)::

    uvicorn.run(app, host="0.0.0.0", port=8443, **server_ssl_options(cert, key, client_ca))
    httpx.Client(verify=client_ssl_context(ca, cert, key))

Missing or unreadable files raise :class:`TlsConfigError` naming the file.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from baml_studio.format.errors import BamlStudioError


class TlsConfigError(BamlStudioError, ValueError):
    """A certificate, key or CA file that is missing or that ``ssl`` cannot load."""


def _readable(what: str, path: Path) -> str:
    if not path.is_file():
        raise TlsConfigError(f"{what} {path} does not exist or is not a file")
    return str(path)


def server_ssl_options(cert: Path, key: Path, client_ca: Path | None) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config``: serve TLS with ``cert`` and
    ``key``; with ``client_ca``, require a client certificate signed by it (mutual TLS)."""
    options: dict[str, Any] = {
        "ssl_certfile": _readable("server certificate", cert),
        "ssl_keyfile": _readable("server key", key),
    }
    if client_ca is not None:
        options["ssl_ca_certs"] = _readable("client CA", client_ca)
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
    return options


def client_ssl_context(
    ca: Path, cert: Path | None = None, key: Path | None = None
) -> ssl.SSLContext:
    """A context trusting only ``ca`` for the server (hostname checked), presenting ``cert``
    with ``key`` when given (both or neither), TLS 1.2 or newer."""
    if (cert is None) != (key is None):
        raise TlsConfigError("give both the client certificate and its key, or neither")
    try:
        context = ssl.create_default_context(cafile=_readable("server CA", ca))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if cert is not None and key is not None:
            context.load_cert_chain(
                _readable("client certificate", cert), _readable("client key", key)
            )
    except ssl.SSLError as exc:
        raise TlsConfigError(f"cannot load the TLS files ({ca}, {cert}, {key}): {exc}") from exc
    return context
