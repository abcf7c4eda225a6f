"""Fixtures of the queue tests: boto3 clients on the shared ministack, and both adapters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from queue_harness import SqliteHarness, SqsHarness

from ministack_fixture import client


@pytest.fixture
def sqs_client(ministack_endpoint: str) -> Iterator[Any]:
    sqs = client("sqs", ministack_endpoint)
    yield sqs
    sqs.close()


@pytest.fixture
def s3_client(ministack_endpoint: str) -> Iterator[Any]:
    s3 = client("s3", ministack_endpoint)
    yield s3
    s3.close()


@pytest.fixture(params=["sqlite", "sqs"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Both queue adapters behind one interface (see ``queue_harness``)."""
    if request.param == "sqlite":
        h: Any = SqliteHarness(tmp_path)
    else:
        h = SqsHarness(request.getfixturevalue("sqs_client"))
    try:
        yield h
    finally:
        h.close()
