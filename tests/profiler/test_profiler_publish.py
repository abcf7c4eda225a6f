"""The profiler's optional in-process publisher: started with the profiler, closed after it."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

# The real-gateway rig lives with the publisher tests (a folder of plain modules, not a package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "publisher"))

from publisher_fake_gateway import free_port
from publisher_real_gateway import PREFIX, real_gateway

from baml_studio.profiler import Profiler, ProfilerConfig, baml_function
from baml_studio.publisher import PublishState
from baml_studio.store import StoreReader
from baml_studio.tokenfile import write_token_file


@baml_function(name="publish.Work", llm=True)
def work(text: str) -> str:
    return text.upper() * 50


def _profiled_run(config: ProfilerConfig) -> Profiler:
    prof = Profiler(config).activate()
    try:
        for i in range(20):
            work(f"call {i}")
    finally:
        prof.close()
    return prof


def test_a_profiled_run_ends_with_its_segments_in_the_bucket(tmp_path: Path) -> None:
    root = tmp_path / ".baml" / "profiles-v1"
    with real_gateway(tmp_path / "data") as (url, token, dataplane):
        config = ProfilerConfig(store_root=root, publish_gateway_url=url, publish_token=token)
        prof = _profiled_run(config)
        assert prof.publish_failures == 0 and prof.publisher is None
        keys = [info.key for info in dataplane.store.list(PREFIX)]
    reader = StoreReader(root)
    (euid,) = reader.list_streams()
    expected_meta = {f"{PREFIX}streams/{euid.hex()}/meta/{s:020d}.bamlmeta.zst"
                     for s in reader.meta_sequences(euid)}  # fmt: skip
    expected_data = {f"{PREFIX}streams/{euid.hex()}/data/{s:020d}.bamldata.zst"
                     for s in reader.data_sequences(euid)}  # fmt: skip
    assert expected_meta and expected_data
    assert expected_meta | expected_data <= set(keys)
    cursor = PublishState(root).read_cursor(euid)
    assert cursor.meta == max(reader.meta_sequences(euid))  # the terminal meta shipped too
    assert cursor.data == max(reader.data_sequences(euid))


def test_publishing_is_off_by_default(tmp_path: Path) -> None:
    prof = _profiled_run(ProfilerConfig(store_root=tmp_path / "profiles-v1"))
    assert prof.publisher is None and prof.publish_failures == 0
    assert not (tmp_path / "profiles-v1" / "publish").exists()


@pytest.mark.parametrize("url", ["http://127.0.0.1:{port}", "not a url at all"])
def test_a_bad_gateway_is_a_counted_failure_not_an_app_error(
    tmp_path: Path, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "profiles-v1"
    config = ProfilerConfig(
        store_root=root, publish_gateway_url=url.format(port=free_port()), publish_token="t"
    )
    with caplog.at_level(logging.WARNING):
        prof = _profiled_run(config)
    assert prof.publish_failures >= 1
    assert caplog.records
    assert StoreReader(root).scan().executions  # the local store is complete regardless


def test_the_environment_turns_publishing_on(tmp_path: Path) -> None:
    env = {"BAML_PROFILE_DIR": str(tmp_path), "BAML_PUBLISH_GATEWAY": " http://h:1 ",
           "BAML_PUBLISH_TOKEN": "tok"}  # fmt: skip
    config = ProfilerConfig.from_env(env, project_dir=tmp_path)
    assert config.publishes and config.publish_gateway_url == "http://h:1"
    assert not ProfilerConfig.from_env({"BAML_PROFILE_DIR": str(tmp_path)}).publishes
    assert not ProfilerConfig.from_env({"BAML_PUBLISH_GATEWAY": "http://h:1"}).publishes
    with_file = ProfilerConfig.from_env(
        {"BAML_PUBLISH_GATEWAY": "http://h:1", "BAML_PUBLISH_TOKEN_FILE": " /run/publisher.token "}
    )
    assert with_file.publishes and with_file.publish_token_file == Path("/run/publisher.token")


def test_a_token_file_ships_the_run_and_a_missing_one_is_a_counted_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / ".baml" / "profiles-v1"
    token_file = tmp_path / "publisher.token"
    with real_gateway(tmp_path / "data") as (url, token, dataplane):
        write_token_file(token_file, token)
        config = ProfilerConfig(
            store_root=root, publish_gateway_url=url, publish_token_file=token_file
        )
        prof = _profiled_run(config)
        assert prof.publish_failures == 0
        keys = [info.key for info in dataplane.store.list(PREFIX)]
    assert any(k.endswith(".bamlmeta.zst") for k in keys)
    missing = ProfilerConfig(
        store_root=tmp_path / "other", publish_gateway_url=url, publish_token_file=tmp_path / "x"
    )
    with caplog.at_level(logging.WARNING):
        prof = _profiled_run(missing)
    assert prof.publish_failures == 1 and "does not exist" in caplog.text
    assert StoreReader(tmp_path / "other").scan().executions  # the local store regardless
