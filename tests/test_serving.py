"""``serve control`` and ``serve dataplane`` stop gracefully on SIGTERM and SIGINT: uvicorn's
shutdown, then the service's stores closed, then exit 0.

uvicorn re-raises the stop signal once it has shut down; with SIGTERM's default action the
process used to die right there (exit -15), so the ``finally`` that closes the stores never ran.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from baml_studio.serving import Signalled, stop_signals_raise

CLI = [sys.executable, "-m", "baml_studio.cli"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve_and_stop(command: list[str], health: str, signum: int) -> tuple[int, str]:
    """Start ``command`` with ``--port``, wait until ``health`` answers, send ``signum``;
    (exit code, stderr)."""
    port = _free_port()
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}{health}", timeout=1)
                break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{command[3:5]} did not start")
            time.sleep(0.1)  # readiness poll of the child process, bounded by the deadline
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_control_closes_its_stores_and_exits_0(tmp_path: Path, signum: int) -> None:
    code, stderr = _serve_and_stop(
        [*CLI, "serve", "control", "--data", str(tmp_path / "control")], "/healthz", signum
    )
    assert code == 0, stderr
    assert "control plane stopped (stores closed); fact store: {'inserts': 0" in stderr, stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_dataplane_closes_its_queue_and_store_and_exits_0(
    tmp_path: Path, signum: int
) -> None:
    code, stderr = _serve_and_stop(
        [*CLI, "serve", "dataplane", "--data", str(tmp_path / "dataplane")],
        "/v1/publisher/config",
        signum,
    )
    assert code == 0, stderr
    assert "gateway stopped (queue, store and workers closed)" in stderr, stderr


def test_stop_signals_raise_in_the_block_and_the_old_handlers_come_back() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for signum in (signal.SIGTERM, signal.SIGINT):
        with pytest.raises(Signalled) as caught, stop_signals_raise():
            signal.raise_signal(signum)
        assert caught.value.signum == signum
        assert {sig: signal.getsignal(sig) for sig in before} == before


@pytest.mark.parametrize(
    "command",
    [["serve", "control", "--data", "control"], ["serve", "dataplane", "--data", "dataplane"]],
    ids=["control", "dataplane"],
)
def test_a_server_that_cannot_start_exits_4_with_why_and_closes_its_stores(
    tmp_path: Path, command: list[str]
) -> None:
    """A port in use: uvicorn logs why and exits 3 (undocumented here); the command says
    what it could not serve on, closes its stores and exits 4 (unavailable)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            [*CLI, *command[:3], str(tmp_path / command[3]), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 4, done.stderr
    assert f"error: could not serve on 127.0.0.1:{port}" in done.stderr, done.stderr
    assert "address already in use" in done.stderr, done.stderr
    assert "stopped" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_tls_certificate_that_cannot_be_loaded_exits_4(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("garbage")
    key.write_text("garbage")
    done = subprocess.run(
        [*CLI, "serve", "dataplane", "--data", str(tmp_path / "dp"), "--port", str(_free_port()),
         "--tls-cert", str(cert), "--tls-key", str(key)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert "error: could not serve on" in done.stderr and "Traceback" not in done.stderr
