"""``baml-studio serve dataplane`` as a child process on 127.0.0.1: the real wiring of the
gateway, the query coordinator and the erasure routes, for the tests that need all of it."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

CLI = [sys.executable, "-m", "baml_studio.cli"]
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def dataplane_process(
    data: Path,
    control_url: str,
    workload_token: str,
    *options: str,
    verify: ssl.SSLContext | None = None,
) -> Iterator[str]:
    """``serve dataplane --data DATA --port P --control-plane URL OPTIONS…`` with the workload
    token in its environment (``--workload-token-file`` among ``options`` wins over it);
    yields its base URL once it answers (``https`` when ``verify`` is given: the TLS options
    must be among ``options``) and terminates it afterwards."""
    port = free_port()
    process = subprocess.Popen(
        [*CLI, "serve", "dataplane", "--data", str(data), "--port", str(port), "--control-plane",
         control_url, *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "BAML_WORKLOAD_TOKEN": workload_token},
    )  # fmt: skip
    url = f"{'http' if verify is None else 'https'}://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            httpx.get(
                f"{url}/v1/publisher/config",
                verify=verify if verify is not None else True,
                timeout=1,
            )
            break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"serve dataplane did not start: {process.stderr.read()!r}")
        time.sleep(0.1)  # readiness poll of the child process, bounded by the deadline
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
