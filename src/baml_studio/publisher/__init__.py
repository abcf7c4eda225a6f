"""The publisher: ships the local store's closed files to the customer's bucket via the gateway.

Modules: ``config`` (gateway config and local settings), ``errors`` (exception tree), ``pack``
(the ``BAMLPCK1`` value pack format), ``state`` (cursors, shipped ledger, in-flight journal),
``plan`` (what a flush ships), ``collect`` and ``collect_cas`` (choosing it), ``client`` (HTTP
adapter), ``flush`` (one flush), ``retention`` (local expiry and disk pressure) and
``publisher`` (the background thread)::

    from baml_studio.publisher import Publisher
    publisher = Publisher(Path(".baml/profiles-v1"), "http://127.0.0.1:8080", token)
    publisher.start()          # flushes every flush_interval_seconds
    publisher.close()          # final flush on shutdown
"""

from baml_studio.publisher.client import GatewayClient, PutOutcome
from baml_studio.publisher.collect import FlushPlan, Kind, Outgoing, Problem, collect_flush
from baml_studio.publisher.config import PublisherConfig, PublisherSettings
from baml_studio.publisher.errors import (
    CaptureDisabled,
    GatewayAuthError,
    GatewayError,
    GatewayProtocolError,
    GatewayRejected,
    GatewayThrottled,
    GatewayUnreachable,
    PackError,
    PublisherError,
    UploadFailed,
)
from baml_studio.publisher.flush import FlushReport, run_flush
from baml_studio.publisher.pack import Pack, PackEntry, decode_pack, encode_pack
from baml_studio.publisher.publisher import Publisher
from baml_studio.publisher.retention import RetentionReport, apply_retention
from baml_studio.publisher.state import Cursor, PublishState

__all__ = [
    "CaptureDisabled",
    "Cursor",
    "FlushPlan",
    "FlushReport",
    "GatewayAuthError",
    "GatewayClient",
    "GatewayError",
    "GatewayProtocolError",
    "GatewayRejected",
    "GatewayThrottled",
    "GatewayUnreachable",
    "Kind",
    "Outgoing",
    "Pack",
    "PackEntry",
    "PackError",
    "Problem",
    "PublishState",
    "Publisher",
    "PublisherConfig",
    "PublisherError",
    "PublisherSettings",
    "PutOutcome",
    "RetentionReport",
    "UploadFailed",
    "apply_retention",
    "collect_flush",
    "decode_pack",
    "encode_pack",
    "run_flush",
]
