"""The publisher's failure must-shows against the real gateway over both adapter families
(directory bucket + SQLite queue, and S3 + SQS on ministack): a lost PUT response, an unreachable
gateway, a publisher SIGKILLed mid-flush, and a rotated (retired) publisher token."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import publisher_real_gateway
import pytest
from click.testing import CliRunner
from publisher_fake_gateway import free_port
from publisher_fault_transport import FaultTransport, client_class
from publisher_real_gateway import FAMILIES, PREFIX, SCOPE, RealGateway, real_gateway_family

from baml_studio.cli import main as cli_main
from baml_studio.gateway.tokens import KeyRingFile, mint_publisher_token
from baml_studio.publisher import (
    GatewayAuthError,
    GatewayUnreachable,
    Publisher,
    PublisherSettings,
    PublishState,
    UploadFailed,
)
from baml_studio.store import StoreReader

CHILD = Path(__file__).with_name("publisher_fault_transport.py")
NOTIFIED = (".bamlmeta.zst", ".bamlpack.zst")


@pytest.fixture(params=FAMILIES)
def family(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """(family, ministack endpoint or None)."""
    endpoint = request.getfixturevalue("ministack_endpoint") if request.param == "s3" else None
    return request.param, endpoint


@pytest.fixture
def gateway(family: tuple[str, str | None], tmp_path: Path) -> Iterator[RealGateway]:
    with real_gateway_family(family[0], tmp_path / "dataplane", family[1]) as built:
        yield built


def _settings(root: Path, url: str, **extra: object) -> PublisherSettings:
    base: dict[str, object] = {"backoff_base_seconds": 0.01, "backoff_max_seconds": 0.05}
    return PublisherSettings(root, url, **(base | extra))  # type: ignore[arg-type]


def _segment_keys(root: Path) -> list[str]:
    reader = StoreReader(root)
    keys = []
    for euid in reader.list_streams():
        for plane, sequences in (
            ("meta", reader.meta_sequences(euid)),
            ("data", reader.data_sequences(euid)),
        ):
            stem = f"{PREFIX}streams/{euid.hex()}/{plane}/"
            keys += [f"{stem}{s:020d}.baml{plane}.zst" for s in sorted(sequences)]
    return keys


def _all_shipped(root: Path) -> bool:
    reader, state = StoreReader(root), PublishState(root)
    for euid in reader.list_streams():
        cursor = state.read_cursor(euid)
        if cursor.meta != max(reader.meta_sequences(euid), default=0):
            return False
        if cursor.data != max(reader.data_sequences(euid), default=0):
            return False
    return True


def _assert_everything_stored(gateway: RealGateway, root: Path) -> None:
    """Every local segment is in the bucket and the cursors passed every segment."""
    assert _all_shipped(root)
    for key in _segment_keys(root):
        assert gateway.store.head(key).size > 0, key


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*.baml*")}


@pytest.mark.parametrize("suffix", [".bamlpack.zst", ".bamlmeta.zst"])
def test_lost_put_response_is_confirmed_by_stored_and_never_put_twice(
    gateway: RealGateway, demo_store: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = FaultTransport(lose_response_suffix=suffix)
    monkeypatch.setattr("baml_studio.publisher.publisher.GatewayClient", client_class(transport))
    settings = _settings(demo_store, gateway.url, put_attempts=1)
    publisher = Publisher(demo_store, gateway.url, gateway.token, settings=settings)
    with pytest.raises(UploadFailed):
        publisher.flush()  # the object landed; its response was lost
    lost = transport.lost
    assert lost is not None and lost.endswith(suffix)
    assert gateway.store.head(lost).size > 0 and not _all_shipped(demo_store)
    report = publisher.flush()
    assert report.complete, report.problems
    assert lost in report.stored and lost not in report.uploaded
    assert all(n == 1 for n in transport.counts().values()), transport.counts()
    _assert_everything_stored(gateway, demo_store)
    notified = sorted(k for k in set(transport.puts) if k.endswith(NOTIFIED))
    events = gateway.drain_events(want=len(notified))
    assert sorted(e.key for e in events) == notified  # one event per object: one PUT each


def test_unreachable_gateway_keeps_files_then_the_retried_flush_succeeds(
    family: tuple[str, str | None],
    demo_store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()  # nothing listens here yet
    url = f"http://127.0.0.1:{port}"
    data_dir = tmp_path / "dataplane"
    # the data plane's key ring exists before the data plane does, so the token works later
    token = mint_publisher_token(
        KeyRingFile(data_dir / "keys" / "publisher-keys.json").load_or_create(), SCOPE, 3600
    )
    before = _files(demo_store)
    budget = 2 * sum(before.values())
    settings = _settings(demo_store, url, disk_budget_bytes=budget)
    publisher = Publisher(demo_store, url, token, settings=settings)
    for _ in range(3):
        assert publisher.try_flush() is None
        assert isinstance(publisher.last_error, GatewayUnreachable)
        time.sleep(0.06)  # past the backoff
    assert _files(demo_store) == before and sum(before.values()) <= budget
    monkeypatch.setattr(publisher_real_gateway, "free_port", lambda: port)
    with real_gateway_family(family[0], data_dir, family[1]) as gateway:
        assert gateway.url == url
        deadline = time.monotonic() + 20
        report = publisher.try_flush()
        while report is None and time.monotonic() < deadline:
            time.sleep(0.02)  # retried under the backoff until it succeeds
            report = publisher.try_flush()
        assert report is not None and report.complete, publisher.last_error
        assert publisher.last_error is None
        _assert_everything_stored(gateway, demo_store)
        assert sum(_files(demo_store).values()) <= budget
        publisher.close()


def test_killed_publisher_reships_from_a_fresh_process_and_landed_objects_answer_stored(
    gateway: RealGateway, demo_store: Path, tmp_path: Path
) -> None:
    log, marker = tmp_path / "puts.log", tmp_path / "held"
    args = [sys.executable, str(CHILD), str(demo_store), gateway.url, gateway.token, str(log)]
    child = subprocess.Popen([*args, ".bamldata.zst", str(marker)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marker.exists(), f"the child never held a PUT (exit {child.poll()})"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    landed = log.read_text().split()
    held = marker.read_text()
    assert held in landed and gateway.store.head(held).size > 0  # landed, never acknowledged
    assert not _all_shipped(demo_store)
    log2 = tmp_path / "puts2.log"
    done = subprocess.run(
        [*args[:-1], str(log2)], capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(done.stdout)
    assert report["complete"], report["problems"]
    assert set(landed) <= set(report["stored"])
    assert set(landed).isdisjoint(report["puts"])  # nothing uploaded twice
    assert len(set(report["puts"])) == len(report["puts"])
    _assert_everything_stored(gateway, demo_store)


@pytest.mark.parametrize("refused_by", ["config", "authorize"])
def test_rotated_and_retired_token_stops_shipping_until_set_token(
    gateway: RealGateway,
    demo_store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    refused_by: str,
) -> None:
    transport = FaultTransport()
    monkeypatch.setattr("baml_studio.publisher.publisher.GatewayClient", client_class(transport))
    now = [1000.0]
    publisher = Publisher(
        demo_store, gateway.url, gateway.token,
        settings=_settings(demo_store, gateway.url), clock=lambda: now[0],
    )  # fmt: skip
    assert publisher.refresh_config() is not None  # the old token works
    old_kid = gateway.dataplane.keys.load().active
    data_dir = tmp_path / "dataplane"
    rotated = CliRunner().invoke(
        cli_main, ["tokens", "rotate", "--data", str(data_dir), "--retire", old_kid]
    )
    assert rotated.exit_code == 0, rotated.output
    new_kid = rotated.output.strip()
    assert new_kid != old_kid and gateway.dataplane.keys.load().get(old_kid) is None
    answer = httpx.get(
        f"{gateway.url}/v1/publisher/config",
        headers={
            "Authorization": f"Bearer {gateway.token}",
            "X-Baml-Request-Id": str(uuid.uuid4()),
        },
    )
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "unknown_signing_key"
    before = _files(demo_store)
    if refused_by == "config":
        now[0] += 301  # the five-minute config refresh meets the retired key
    # else the config is still fresh and the retired key is refused by authorize
    with pytest.raises(GatewayAuthError) as raised:
        publisher.flush()
    assert raised.value.status == 401
    assert publisher.shipping_stopped and transport.puts == []
    assert publisher.try_flush() is None and publisher.shipping_stopped  # keeps everything
    assert _files(demo_store) == before and list(gateway.store.list(PREFIX)) == []
    new_token = mint_publisher_token(gateway.dataplane.keys.load(), SCOPE, 3600)
    publisher.set_token(new_token)
    report = publisher.flush()
    assert report.complete and not publisher.shipping_stopped, report.problems
    assert all(n == 1 for n in transport.counts().values())
    _assert_everything_stored(gateway, demo_store)
