"""Session-wide fixtures shared by every test package."""

from __future__ import annotations

from chdb_fixture import chdb_dsn, fact_database
from ministack_fixture import ministack_endpoint

__all__ = ["chdb_dsn", "fact_database", "ministack_endpoint"]
