"""Fixtures of the tests against the stub coordinator (:mod:`coordinator_stub`): the client's
and the remote CLI's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from coordinator_stub import StubCoordinator, stub_coordinator


@pytest.fixture(scope="module")
def stub_served() -> Iterator[tuple[StubCoordinator, str]]:
    """The stub and its base URL, one per test module."""
    with stub_coordinator() as pair:
        yield pair


@pytest.fixture
def stub(stub_served: tuple[StubCoordinator, str]) -> StubCoordinator:
    """The module's stub with nothing recorded and no failure pending."""
    stub_served[0].reset()
    return stub_served[0]
