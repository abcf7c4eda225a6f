"""Lost responses, shared values, an unreachable gateway, a killed publisher, a rotated token."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from publisher_checks import all_shipped
from publisher_env import TOKEN, FakeEnv
from publisher_fake_gateway import FakeGateway, make_bucket, serve_fake

from baml_studio.publisher import (
    GatewayAuthError,
    GatewayUnreachable,
    Publisher,
    PublisherSettings,
    UploadFailed,
)
from baml_studio.store import StoreReader
from baml_studio.tokenfile import TokenFile, write_token_file
from baml_studio.workload import run_workload


def _settings(root: Path, url: str, **extra: object) -> PublisherSettings:
    base: dict[str, object] = {"backoff_base_seconds": 0.01, "backoff_max_seconds": 0.05}
    return PublisherSettings(root, url, **(base | extra))  # type: ignore[arg-type]


def test_lost_put_response_is_confirmed_by_stored(fake_env: FakeEnv, demo_store: Path) -> None:
    fake_env.gateway.drop_response_for = {".bamlpack.zst", ".bamldata.zst"}
    settings = _settings(demo_store, fake_env.url, put_attempts=1)
    publisher = Publisher(demo_store, fake_env.url, TOKEN, settings=settings)
    with pytest.raises(UploadFailed):
        publisher.flush()  # the pack landed, its response was lost
    assert not all_shipped(demo_store)
    with pytest.raises(UploadFailed):
        publisher.flush()  # the pack answers stored now; a data segment's response is lost
    report = publisher.flush()
    assert report.complete and all_shipped(demo_store)
    assert any(k.endswith(".bamlpack.zst") for k in report.stored)
    assert any(k.endswith(".bamldata.zst") for k in report.stored)
    assert all(n == 1 for n in Counter(fake_env.gateway.puts).values())


def test_lost_response_within_one_flush_reauthorizes(fake_env: FakeEnv, demo_store: Path) -> None:
    fake_env.gateway.drop_response_for = {".bamlmeta.zst"}
    publisher = Publisher(
        demo_store, fake_env.url, TOKEN, settings=_settings(demo_store, fake_env.url)
    )
    report = publisher.flush()
    assert report.complete and all_shipped(demo_store)
    assert any(k.endswith(".bamlmeta.zst") for k in report.stored)
    assert all(n == 1 for n in Counter(fake_env.gateway.puts).values())


def test_large_value_shared_by_two_processes_is_stored_once(
    fake_env: FakeEnv, demo_store: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other" / "profiles-v1"
    run_workload(other, executions=24, processes=2, seed=11)
    assert set(StoreReader(other).list_streams()).isdisjoint(StoreReader(demo_store).list_streams())
    first = Publisher(demo_store, fake_env.url, TOKEN).flush()
    second = Publisher(other, fake_env.url, TOKEN).flush()
    large = [k for k in first.uploaded if "/cas/values/" in k]
    assert large and all(k in second.stored for k in large)
    assert not [k for k in second.uploaded if "/cas/" in k]
    assert all(n == 1 for n in Counter(fake_env.gateway.puts).values())
    assert all_shipped(other)


def test_unreachable_gateway_keeps_files_and_retries(tmp_path: Path, demo_store: Path) -> None:
    from publisher_fake_gateway import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    before = sorted(p.relative_to(demo_store) for p in demo_store.rglob("*.baml*"))
    publisher = Publisher(demo_store, url, TOKEN, settings=_settings(demo_store, url))
    publisher.start()
    deadline = time.monotonic() + 10
    while publisher.last_error is None and time.monotonic() < deadline:
        time.sleep(0.01)  # wait for the thread's first failed attempt
    assert isinstance(publisher.last_error, GatewayUnreachable)
    assert sorted(p.relative_to(demo_store) for p in demo_store.rglob("*.baml*")) == before
    gateway = FakeGateway(make_bucket(tmp_path / "bucket", port), {TOKEN})
    with serve_fake(gateway, port):
        deadline = time.monotonic() + 20
        while not all_shipped(demo_store) and time.monotonic() < deadline:
            time.sleep(0.02)  # the background thread retries with backoff
        publisher.close()
    assert all_shipped(demo_store) and gateway.puts


def test_killed_publisher_reships_and_landed_objects_answer_stored(
    fake_env: FakeEnv, demo_store: Path
) -> None:
    fake_env.gateway.hold_put_suffix = ".bamldata.zst"
    script = (
        "import sys; from pathlib import Path; from baml_studio.publisher import Publisher;"
        "Publisher(Path(sys.argv[1]), sys.argv[2], sys.argv[3]).flush()"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(demo_store), fake_env.url, TOKEN])
    try:
        assert fake_env.gateway.held.wait(30)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        fake_env.gateway.release.set()
    landed = list(fake_env.gateway.puts)
    assert landed and not all_shipped(demo_store)
    fake_env.gateway.hold_put_suffix = None
    report = Publisher(demo_store, fake_env.url, TOKEN).flush()
    assert report.complete and all_shipped(demo_store)
    assert set(landed) <= set(report.stored)
    assert all(n == 1 for n in Counter(fake_env.gateway.puts).values())


def test_a_token_file_rotated_while_shipping_is_stopped_resumes_it_without_set_token(
    fake_env: FakeEnv, demo_store: Path, tmp_path: Path
) -> None:
    """The contract's rotation (a 401 stops shipping; the config is re-read with the new
    token) without the application's help: the token comes from a file the customer
    rewrites, re-read when it changes."""
    now = [1000.0]
    token_file = tmp_path / "publisher.token"
    write_token_file(token_file, TOKEN)
    settings = _settings(demo_store, fake_env.url)
    publisher = Publisher(
        demo_store, fake_env.url, TokenFile(token_file), settings=settings, clock=lambda: now[0]
    )
    fake_env.gateway.tokens = {"token-two"}  # the old token revoked
    with pytest.raises(GatewayAuthError):
        publisher.flush()
    assert publisher.shipping_stopped and fake_env.gateway.puts == []
    with pytest.raises(GatewayAuthError):
        publisher.flush()  # the same file, the same refused token
    write_token_file(token_file, "token-two")
    now[0] += 31  # past auth_retry_seconds, as the publisher's thread waits
    report = publisher.flush()  # the config is read again, with the file's new token
    assert report.complete and not publisher.shipping_stopped and all_shipped(demo_store)


def test_rotated_token_stops_shipping_and_resumes(fake_env: FakeEnv, demo_store: Path) -> None:
    now = [1000.0]
    publisher = Publisher(
        demo_store, fake_env.url, TOKEN,
        settings=_settings(demo_store, fake_env.url), clock=lambda: now[0],
    )  # fmt: skip
    fake_env.gateway.tokens = {"token-two"}
    with pytest.raises(GatewayAuthError):
        publisher.flush()
    assert publisher.shipping_stopped and fake_env.gateway.puts == []
    assert publisher.try_flush() is None  # backs off, keeps everything
    publisher.set_token("token-two")
    report = publisher.flush()
    assert report.complete and not publisher.shipping_stopped and all_shipped(demo_store)
    fake_env.gateway.tokens = {"token-three"}
    now[0] += 301  # the five-minute config refresh sees the rotation
    with pytest.raises(GatewayAuthError):
        publisher.flush()
    assert publisher.shipping_stopped
