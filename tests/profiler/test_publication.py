"""When the consumer publishes: the publish interval, the size target, flush."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from readback import load

import baml_studio.profiler.profiler as profiler_module
from baml_studio.format.records import RootStatus
from baml_studio.profiler import Profiler, ProfilerConfig, baml_function
from baml_studio.store import StoreReader


@baml_function(name="publication.Work", llm=True)
def work(text: str) -> str:
    return text.upper()


def _data_files(root: Path) -> list[Path]:
    return sorted(root.glob("streams/*/data/*.bamldata"))


def _wait_for(condition: object, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_publish_interval_publishes_without_a_flush(store_root: Path) -> None:
    prof = Profiler(
        ProfilerConfig(store_root=store_root, publish_interval_s=0.05, wake_interval_s=0.01)
    ).activate()
    try:
        work("a")
        assert _wait_for(lambda: any(e.ended for e in StoreReader(store_root).scan().executions))
    finally:
        prof.close()


def test_without_an_interval_nothing_is_published_before_flush(store_root: Path) -> None:
    prof = Profiler(
        ProfilerConfig(store_root=store_root, publish_interval_s=None, wake_interval_s=0.01)
    ).activate()
    try:
        work("a")
        drained = _wait_for(lambda: not prof.recorder.events)
        assert drained and _data_files(store_root) == []
        assert prof.flush()
        assert len(_data_files(store_root)) == 1
    finally:
        prof.close()


def test_size_target_splits_data_into_several_segments(store_root: Path) -> None:
    prof = Profiler(
        ProfilerConfig(store_root=store_root, publish_interval_s=None, segment_target_bytes=2000)
    ).activate()
    for index in range(40):
        work(f"text {index}")
    prof.close()
    assert len(_data_files(store_root)) > 2
    view = load(store_root)
    assert len(view.executions) == 40
    for ex in view.executions.values():
        assert ex.ended is not None and ex.ended.status == RootStatus.SUCCEEDED
        assert ex.ended.data_segment_count == 1


def test_many_roots_make_few_files(store_root: Path) -> None:
    prof = Profiler(ProfilerConfig(store_root=store_root, publish_interval_s=None)).activate()
    for index in range(1000):
        work(str(index % 7))  # 7 distinct inputs: values dedupe in the CAS
    prof.close()
    # reference facts §8.1: 1,000 roots -> 2 meta segments and at most 2 data files
    assert len(sorted(store_root.glob("streams/*/meta/*.bamlmeta"))) == 2
    assert len(_data_files(store_root)) <= 2
    assert len(list(store_root.glob("cas/sha256/*/*.bamlvalue"))) == 1 + 14


def test_a_backlog_is_published_as_it_is_applied(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events queued faster than the consumer applies them: one pass applies them a slice
    at a time and publishes whenever a publication is due, so the first executions' ends
    reach the store before the whole backlog is applied (not in one cycle at the end)."""
    monkeypatch.setattr(profiler_module, "DRAIN_SLICE", 50)
    prof = Profiler(  # the consumer thread sleeps; the test runs its pass
        ProfilerConfig(store_root=store_root, publish_interval_s=0.0, wake_interval_s=3600)
    ).activate()
    try:
        for index in range(120):
            work(f"text {index}")
        queued = len(prof.recorder.events)
        assert queued > 10 * 50
        prof._pass(force=False)
        assert not prof.recorder.events
        metas = sorted(store_root.glob("streams/*/meta/*.bamlmeta"))
        assert len(metas) > 4  # one cycle would have made two: meta-pre and meta-post
        view = load(store_root)
        assert len(view.executions) == 120
        assert all(ex.ended is not None for ex in view.executions.values())
        ended_in = {ex.ended_meta_seq for ex in view.executions.values()}
        assert len(ended_in) > 1
    finally:
        prof.close()
    assert prof.recorder.stats.internal_errors == 0


def test_a_close_that_times_out_says_what_is_not_written_yet(
    store_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A burst and then exit: the consumer is a daemon thread, so what it had not applied when
    close() gave up was lost without a word (an audit lost 84 % of 100,000 calls)."""
    prof = Profiler(
        ProfilerConfig(store_root=store_root, publish_interval_s=0.0, wake_interval_s=3600)
    ).activate()
    for index in range(2000):
        work(f"text {index}")
    queued = len(prof.recorder.events)
    assert queued > 1000
    with caplog.at_level("WARNING", logger="baml_studio.profiler.profiler"):
        done = prof.close(timeout=0.0)
    assert not done
    (warning,) = [r for r in caplog.records if "not yet written" in r.getMessage()]
    assert "lost if the process exits" in warning.getMessage()
    assert prof._thread is not None  # reason: wait for the background writer, as advised
    prof._thread.join(120)
    assert len(load(store_root).executions) == 2000  # all written once it finished


def test_a_backlog_at_close_is_published_as_it_is_applied(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same at close (the final pass): a process that made its calls faster than the
    consumer applied them and then closed gets its backlog applied a slice at a time with the
    publications that fall due in between, not held whole until one cycle at the end."""
    monkeypatch.setattr(profiler_module, "DRAIN_SLICE", 50)
    prof = Profiler(  # the consumer thread sleeps until close wakes it for the final pass
        ProfilerConfig(store_root=store_root, publish_interval_s=0.0, wake_interval_s=3600)
    ).activate()
    for index in range(120):
        work(f"text {index}")
    assert len(prof.recorder.events) > 10 * 50
    assert prof.close(timeout=60)
    metas = sorted(store_root.glob("streams/*/meta/*.bamlmeta"))
    assert len(metas) > 4  # one cycle at the end made two: meta-pre and meta-post
    view = load(store_root)
    assert len(view.executions) == 120
    assert all(ex.ended is not None for ex in view.executions.values())
    assert all(ex.ended.status == RootStatus.SUCCEEDED for ex in view.executions.values())
    assert len({ex.ended_meta_seq for ex in view.executions.values()}) > 1
    assert prof.recorder.stats.internal_errors == 0
