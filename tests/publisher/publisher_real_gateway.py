"""The real gateway on 127.0.0.1 for publisher tests and the benchmark, over either adapter
family: the embedded defaults (directory bucket + SQLite queue under a data dir) or S3 + SQS on
ministack, wired by ``open_dataplane`` with ``s3_notifications: "configure"`` exactly as
``serve dataplane --setup-s3`` does. ``limits`` replaces the served (and enforced) publisher
limits; ``port`` and ``name`` let a test stop a data plane and start it again at the same URL over
the same bucket and queue (the directory family keeps them under its data dir)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from publisher_fake_gateway import free_port, serve_fake

from baml_studio.gateway.config import GatewayConfig, PublisherLimits, Scope
from baml_studio.gateway.service import (
    Dataplane,
    DataplaneConfig,
    load_dataplane_config,
    open_dataplane,
)
from baml_studio.gateway.tokens import mint_publisher_token
from baml_studio.objectstore.config import S3Config
from baml_studio.objectstore.notifications import ObjectCreated, parse_s3_event
from baml_studio.objectstore.port import ObjectStore
from baml_studio.objectstore.s3 import S3ObjectStore
from baml_studio.queue.config import SqsQueueConfig
from baml_studio.queue.port import Queue
from baml_studio.queue.sqs import SqsQueue
from ministack_fixture import CREDENTIALS, REGION, client

SCOPE = Scope("tn_pub", "prj_pub", "env_pub")
PREFIX = f"evidence/v1/{SCOPE.tenant}/{SCOPE.project}/{SCOPE.environment}/"
FAMILIES = ("directory", "s3")
SQS_WAIT_S = 5
"""Bounded long poll for S3 → SQS delivery (ministack delivers asynchronously)."""


@dataclass
class RealGateway:
    """One served data plane: its URL, a token for ``SCOPE``, its store and projection queue."""

    family: str
    url: str
    token: str
    dataplane: Dataplane
    queue: Queue
    bucket: str
    seen: list[ObjectCreated] = field(default_factory=list)

    @property
    def store(self) -> ObjectStore:
        return self.dataplane.store

    def drain_events(self, want: int) -> list[ObjectCreated]:
        """Every ObjectCreated event queued since the last drain (``s3:TestEvent`` ignored),
        deleted as read. Waits (bounded) until ``want`` arrived, then reads once more so an
        extra event would show."""
        events: list[ObjectCreated] = []
        wait = SQS_WAIT_S if self.family == "s3" else 0
        while len(events) < want:
            batch = self.queue.receive(max_messages=10, wait_s=wait)
            if not batch:
                break
            events.extend(self._take(batch))
        events.extend(self._take(self.queue.receive(max_messages=10, wait_s=min(wait, 1))))
        self.seen.extend(events)
        return events

    def _take(self, batch: list[Any]) -> list[ObjectCreated]:
        out = [event for message in batch for event in parse_s3_event(message.body)]
        for message in batch:
            self.queue.delete(message.receipt)
        return out


@contextmanager
def real_gateway(
    data_dir: Path, *, limits: PublisherLimits | None = None, port: int | None = None
) -> Iterator[tuple[str, str, Any]]:
    """The embedded defaults; yields (base URL, publisher token, Dataplane)."""
    port = port or free_port()
    config = load_dataplane_config(data_dir, host="127.0.0.1", port=port)
    if limits is not None:
        config = replace(config, gateway=replace(config.gateway, limits=limits))
    dataplane = open_dataplane(config)
    dataplane.environments.add(SCOPE)
    token = mint_publisher_token(dataplane.keys.load(), SCOPE, 3600)
    try:
        with serve_fake(dataplane.app, port) as url:
            yield url, token, dataplane
    finally:
        dataplane.close()


@contextmanager
def real_gateway_family(
    family: str,
    data_dir: Path,
    ministack_endpoint: str | None = None,
    *,
    limits: PublisherLimits | None = None,
    port: int | None = None,
    name: str | None = None,
) -> Iterator[RealGateway]:
    """The real gateway over ``family`` (one of ``FAMILIES``); S3 needs ``ministack_endpoint``
    and gets a fresh versioned bucket and a fresh queue, or those named ``name`` (created if
    missing, reused otherwise)."""
    if family == "directory":
        with real_gateway(data_dir, limits=limits, port=port) as (url, token, dataplane):
            assert dataplane.queue is not None
            yield RealGateway(family, url, token, dataplane, dataplane.queue, "evidence")
        return
    if family != "s3" or ministack_endpoint is None:
        raise ValueError(f"family {family!r} needs one of {FAMILIES} (s3 with an endpoint)")
    bucket = name or f"pub-{uuid.uuid4().hex[:20]}"
    s3 = S3Config(
        bucket=bucket,
        region=REGION,
        endpoint_url=ministack_endpoint,
        access_key_id=CREDENTIALS["aws_access_key_id"],
        secret_access_key=CREDENTIALS["aws_secret_access_key"],
        max_attempts=2,
    )
    S3ObjectStore(s3, client=client("s3", ministack_endpoint)).ensure_bucket(versioning=True)
    port = port or free_port()
    config = DataplaneConfig(
        data_dir=data_dir,
        public_base_url=f"http://127.0.0.1:{port}",
        gateway=GatewayConfig(limits=limits or PublisherLimits()),
        s3=s3,
        sqs=SqsQueueConfig(name=bucket, region=REGION, endpoint_url=ministack_endpoint),
        s3_notifications="configure",
    )
    dataplane = open_dataplane(config)
    status = dataplane.notifications
    assert status is not None and status.ok, status
    dataplane.environments.add(SCOPE)
    token = mint_publisher_token(dataplane.keys.load(), SCOPE, 3600)
    queue = SqsQueue(
        client("sqs", ministack_endpoint), status.queue_url, dead_letter_url=status.dead_letter_url
    )
    try:
        with serve_fake(dataplane.app, port) as url:
            yield RealGateway(family, url, token, dataplane, queue, s3.bucket)
    finally:
        dataplane.close()
