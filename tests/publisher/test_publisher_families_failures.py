"""The publisher's failure must-shows against the real gateway over both adapter families
(directory bucket + SQLite queue, and S3 + SQS on ministack): a lost PUT response, an unreachable
gateway (never up yet, and down after shipping while the store grows past its disk budget), a
publisher SIGKILLed mid-flush, and a rotated (retired) publisher token."""

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
import pytest
from click.testing import CliRunner
from publisher_checks import (
    all_shipped,
    assert_everything_stored,
    fast_settings,
    files,
    segment_keys,
)
from publisher_fake_gateway import free_port
from publisher_fault_transport import FaultTransport, client_class
from publisher_real_gateway import PREFIX, SCOPE, RealGateway, real_gateway_family

from baml_studio.cli import main as cli_main
from baml_studio.gateway.tokens import KeyRingFile, mint_publisher_token
from baml_studio.publisher import (
    GatewayAuthError,
    GatewayUnreachable,
    Publisher,
    PublishState,
    UploadFailed,
)
from baml_studio.store import StoreReader
from baml_studio.store.usage import read_usage_state, scan_physical_usage
from baml_studio.workload import run_workload

CHILD = Path(__file__).with_name("publisher_fault_transport.py")
NOTIFIED = (".bamlmeta.zst", ".bamlpack.zst")


@pytest.fixture
def gateway(family: tuple[str, str | None], tmp_path: Path) -> Iterator[RealGateway]:
    with real_gateway_family(family[0], tmp_path / "dataplane", family[1]) as built:
        yield built


@pytest.mark.parametrize(
    ("suffix", "attempts"),
    [(".bamlpack.zst", 1), (".bamlmeta.zst", 1), (".bamldata.zst", 3), (".bamlvalue.zst", 3)],
)
def test_lost_put_response_is_confirmed_by_stored_and_never_put_twice(
    gateway: RealGateway,
    demo_store: Path,
    suffix: str,
    attempts: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One attempt per PUT: the flush fails and the next flush's authorize answers ``stored``;
    three: the same flush re-authorizes the object and gets ``stored``."""
    transport = FaultTransport(lose_response_suffix=suffix)
    monkeypatch.setattr("baml_studio.publisher.publisher.GatewayClient", client_class(transport))
    settings = fast_settings(demo_store, gateway.url, put_attempts=attempts)
    publisher = Publisher(demo_store, gateway.url, gateway.token, settings=settings)
    if attempts == 1:
        with pytest.raises(UploadFailed):
            publisher.flush()  # the object landed; its response was lost
        assert transport.lost is not None and not all_shipped(demo_store)
        assert gateway.store.head(transport.lost).size > 0
    report = publisher.flush()
    lost = transport.lost
    assert lost is not None and lost.endswith(suffix)
    assert report.complete, report.problems
    assert lost in report.stored and lost not in report.uploaded
    assert all(n == 1 for n in transport.counts().values()), transport.counts()
    assert_everything_stored(gateway, demo_store)
    notified = sorted(k for k in set(transport.puts) if k.endswith(NOTIFIED))
    events = gateway.drain_events(want=len(notified))
    assert sorted(e.key for e in events) == notified  # one event per object: one PUT each


def _retry_until_shipped(publisher: Publisher, now: list[float]) -> None:
    """The next attempt after the backoff (the injected clock jumps past it) succeeds."""
    now[0] += 120
    report = publisher.try_flush()
    assert report is not None and report.complete, (publisher.last_error, report)
    assert publisher.last_error is None


def test_unreachable_gateway_keeps_files_then_the_retried_flush_succeeds(
    family: tuple[str, str | None], demo_store: Path, tmp_path: Path
) -> None:
    port = free_port()  # nothing listens here yet
    url = f"http://127.0.0.1:{port}"
    data_dir = tmp_path / "dataplane"
    # the data plane's key ring exists before the data plane does, so the token works later
    token = mint_publisher_token(
        KeyRingFile(data_dir / "keys" / "publisher-keys.json").load_or_create(), SCOPE, 3600
    )
    before = files(demo_store)
    now = [1000.0]
    settings = fast_settings(demo_store, url)
    publisher = Publisher(demo_store, url, token, settings=settings, clock=lambda: now[0])
    for _ in range(3):
        assert publisher.try_flush() is None
        assert isinstance(publisher.last_error, GatewayUnreachable)
        assert publisher.try_flush() is None  # within the backoff: not even attempted
        now[0] += 120
    assert files(demo_store) == before and not all_shipped(demo_store)
    with real_gateway_family(family[0], data_dir, family[1], port=port) as gateway:
        assert gateway.url == url
        _retry_until_shipped(publisher, now)
        assert_everything_stored(gateway, demo_store)
        assert files(demo_store) == before  # shipped files stay for local queries
        publisher.close()


def test_gateway_down_after_shipping_keeps_the_store_within_its_budget_then_ships_the_rest(
    family: tuple[str, str | None], demo_store: Path, tmp_path: Path
) -> None:
    """Shipped files make room while the gateway is down; unshipped ones are never touched."""
    port, name, data_dir = free_port(), f"pub-{uuid.uuid4().hex[:20]}", tmp_path / "dataplane"
    url = f"http://127.0.0.1:{port}"
    with real_gateway_family(family[0], data_dir, family[1], port=port, name=name) as gateway:
        token = gateway.token
        assert Publisher(demo_store, url, token).flush().complete
    old_streams = set(StoreReader(demo_store).list_streams())
    shipped_keys = segment_keys(demo_store)
    shipped_files = files(demo_store)
    run_workload(demo_store, executions=12, processes=1, seed=12)  # recorded while it is down
    new_streams = set(StoreReader(demo_store).list_streams()) - old_streams
    assert new_streams
    state = PublishState(demo_store)
    unshipped = {p: n for p, n in files(demo_store).items() if p not in shipped_files}
    assert unshipped and state.read_cursor(next(iter(new_streams))).data == 0
    usage = scan_physical_usage(state.layout)
    budget = usage - sum(shipped_files.values()) // 2
    state_bytes = sum(p.stat().st_size for p in state.dir.rglob("*") if p.is_file())
    bodies = {p: (demo_store / p).read_bytes() for p in unshipped}
    now = [5000.0]
    settings = fast_settings(demo_store, url, disk_budget_bytes=budget)
    publisher = Publisher(demo_store, url, token, settings=settings, clock=lambda: now[0])
    for _ in range(2):  # a publisher started during the outage: no config, only the budget
        assert publisher.try_flush() is None
        assert isinstance(publisher.last_error, GatewayUnreachable)
        now[0] += 120
    left = files(demo_store)
    assert scan_physical_usage(state.layout) <= budget
    removed = set(shipped_files) - set(left)
    assert removed and removed <= set(shipped_files)
    # the profiler's disk guard reads usage.state: it was rebuilt after the removals (only the
    # publisher's own state files may have shrunk since)
    freed = sum(shipped_files[p] for p in removed)
    assert read_usage_state(state.layout) <= usage - freed + state_bytes
    assert {p: (demo_store / p).read_bytes() for p in unshipped} == bodies  # never touched
    with real_gateway_family(family[0], data_dir, family[1], port=port, name=name) as gateway:
        _retry_until_shipped(publisher, now)
        for euid in new_streams:
            reader = StoreReader(demo_store)
            cursor = state.read_cursor(euid)
            assert (cursor.meta, cursor.data) == (
                max(reader.meta_sequences(euid)),
                max(reader.data_sequences(euid)),
            )
        landed = segment_keys(demo_store) + shipped_keys
        assert all(gateway.store.head(key).size > 0 for key in landed)
        assert scan_physical_usage(state.layout) <= budget
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
    assert not all_shipped(demo_store)
    log2 = tmp_path / "puts2.log"
    done = subprocess.run(
        [*args[:-1], str(log2)], capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(done.stdout)
    assert report["complete"], report["problems"]
    assert set(landed) <= set(report["stored"])
    assert set(landed).isdisjoint(report["puts"])  # nothing uploaded twice
    assert len(set(report["puts"])) == len(report["puts"])
    assert_everything_stored(gateway, demo_store)


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
        settings=fast_settings(demo_store, gateway.url), clock=lambda: now[0],
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
    before = files(demo_store)
    if refused_by == "config":
        now[0] += 301  # the five-minute config refresh meets the retired key
    # else the config is still fresh and the retired key is refused by authorize
    with pytest.raises(GatewayAuthError) as raised:
        publisher.flush()
    assert raised.value.status == 401
    assert publisher.shipping_stopped and transport.puts == []
    assert publisher.try_flush() is None and publisher.shipping_stopped  # keeps everything
    assert files(demo_store) == before and list(gateway.store.list(PREFIX)) == []
    new_token = mint_publisher_token(gateway.dataplane.keys.load(), SCOPE, 3600)
    publisher.set_token(new_token)
    report = publisher.flush()
    assert report.complete and not publisher.shipping_stopped, report.problems
    assert all(n == 1 for n in transport.counts().values())
    assert_everything_stored(gateway, demo_store)
