"""Session-wide fixtures shared by every test package."""

from __future__ import annotations

from ministack_fixture import ministack_endpoint

__all__ = ["ministack_endpoint"]
