"""The data plane's upload gateway: publisher configuration and upload authorization.

- :mod:`~baml_studio.gateway.app`: ``create_app(gateway, bucket=None)``, the ASGI app.
- :mod:`~baml_studio.gateway.authorize`: :class:`Gateway`, the two operations without HTTP.
- :mod:`~baml_studio.gateway.keys`: object keys from scope and entry.
- :mod:`~baml_studio.gateway.tokens`: publisher tokens (mint, verify, key rotation).
- :mod:`~baml_studio.gateway.models`: request/response models generated from openapi.yaml.
- :mod:`~baml_studio.gateway.service`: wiring from a data directory (``serve dataplane``).
- :mod:`~baml_studio.gateway.config`, :mod:`~baml_studio.gateway.errors`.
"""

from __future__ import annotations

from baml_studio.gateway.app import create_app
from baml_studio.gateway.authorize import Gateway
from baml_studio.gateway.config import GatewayConfig, PublisherLimits, Scope
from baml_studio.gateway.errors import GatewayError
from baml_studio.gateway.tokens import KeyRing, PublisherTokenVerifier, mint_publisher_token

__all__ = [
    "Gateway",
    "GatewayConfig",
    "GatewayError",
    "KeyRing",
    "PublisherLimits",
    "PublisherTokenVerifier",
    "Scope",
    "create_app",
    "mint_publisher_token",
]
