"""The real embedded gateway (directory bucket + SQLite queue) on 127.0.0.1 for publisher tests
and the benchmark."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from publisher_fake_gateway import free_port, serve_fake

from baml_studio.gateway.config import Scope
from baml_studio.gateway.service import load_dataplane_config, open_dataplane
from baml_studio.gateway.tokens import mint_publisher_token

SCOPE = Scope("tn_pub", "prj_pub", "env_pub")


@contextmanager
def real_gateway(data_dir: Path) -> Iterator[tuple[str, str, Any]]:
    """Yields (base URL, publisher token, Dataplane)."""
    port = free_port()
    dataplane = open_dataplane(load_dataplane_config(data_dir, host="127.0.0.1", port=port))
    dataplane.environments.add(SCOPE)
    token = mint_publisher_token(dataplane.keys.load(), SCOPE, 3600)
    try:
        with serve_fake(dataplane.app, port) as url:
            yield url, token, dataplane
    finally:
        dataplane.close()
