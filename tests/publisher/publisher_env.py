"""Shared names of the publisher tests (a conftest module cannot be imported by name: every
test folder has one)."""

from __future__ import annotations

from dataclasses import dataclass

from publisher_fake_gateway import FakeGateway

TOKEN = "token-one"


@dataclass
class FakeEnv:
    gateway: FakeGateway
    url: str
    port: int
