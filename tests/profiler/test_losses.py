"""The profiler never raises into or blocks the application; every drop is a counted loss."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from readback import load

from baml_studio.format.records import (
    ROOT_ENDED_FLAG_ROOT_STARTED_LOST,
    RootStarted,
    RootStatus,
    SpanStart,
    ValueAvailable,
    ValueLossReason,
    ValueLost,
    ValueOccurrence,
    ValueRole,
)
from baml_studio.profiler import Profiler, ProfilerConfig, baml_function
from baml_studio.store import AdmissionGate, OsFileSystem, StoreReader


@baml_function(name="losses.Echo", llm=True)
def echo(payload: object) -> object:
    return payload


@baml_function(name="losses.Root")
def root(n: int) -> int:
    return sum(len(str(echo(i))) for i in range(n))


class Unencodable:
    __slots__ = ()

    def __repr__(self) -> str:
        raise RuntimeError("repr explodes")


def _profiler(store_root: Path, **overrides: object) -> Profiler:
    config = ProfilerConfig(store_root=store_root, publish_interval_s=None, **overrides)  # type: ignore[arg-type]
    return Profiler(config).activate()


def test_profiler_off_creates_nothing_and_calls_still_work(tmp_path: Path) -> None:
    config = ProfilerConfig.from_env(
        {"BAML_PROFILE": "0", "BAML_PROFILE_DIR": str(tmp_path / "store")}
    )
    assert not config.enabled
    prof = Profiler(config).activate()
    assert root(3) == 3
    assert prof.flush()
    prof.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("off", ["0", "false", "FALSE", "off", " no "])
def test_profile_off_takes_common_spellings_and_reads_no_other_setting(off: str) -> None:
    """Only "0" turned it off (``false`` left it on), and a profiler that was off still raised
    at start() for a bad publish interval."""
    env = {"BAML_PROFILE": off, "BAML_PROFILE_PUBLISH_INTERVAL_MS": "1s"}
    assert not ProfilerConfig.from_env(env).enabled
    assert ProfilerConfig.from_env({"BAML_PROFILE": "1"}).enabled
    with pytest.raises(ValueError, match="BAML_PROFILE_PUBLISH_INTERVAL_MS"):
        ProfilerConfig.from_env({**env, "BAML_PROFILE": "1"})


def test_from_env_reads_interval_and_dir(tmp_path: Path) -> None:
    env = {"BAML_PROFILE_DIR": str(tmp_path / "x"), "BAML_PROFILE_PUBLISH_INTERVAL_MS": "250"}
    config = ProfilerConfig.from_env(env)
    assert config.store_root == tmp_path / "x" and config.publish_interval_s == 0.25
    assert (
        ProfilerConfig.from_env({"BAML_PROFILE_PUBLISH_INTERVAL_MS": "MAX"}).publish_interval_s
        is None
    )
    default = ProfilerConfig.from_env({}, project_dir=tmp_path)
    assert default.store_root == tmp_path / ".baml" / "profiles-v1" and default.enabled
    assert (
        ProfilerConfig.from_env({"BAML_PROFILE_PUBLISH_INTERVAL_MS": " 0 "}).publish_interval_s == 0
    )


@pytest.mark.parametrize("raw", ["-5", "1.5", "\u0663", "1_000", "5" * 5000, "soon", "12345678901"])
def test_a_bad_publish_interval_is_a_value_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match="BAML_PROFILE_PUBLISH_INTERVAL_MS"):
        ProfilerConfig.from_env({"BAML_PROFILE_PUBLISH_INTERVAL_MS": raw})


def test_value_over_the_ceiling_is_lost_as_too_large(store_root: Path) -> None:
    prof = _profiler(store_root, max_value_bytes=1000)
    big = "x" * 50_000
    assert echo(big) == big
    echo("small")
    prof.close()
    ex = [e for e in load(store_root).executions.values()]
    states = [v.value for e in ex for v in e.of(ValueOccurrence)]
    assert ValueLost(ValueLossReason.VALUE_TOO_LARGE) in states
    assert any(isinstance(s, ValueAvailable) for s in states)


def test_values_over_32_kib_are_kept_as_cas_objects(store_root: Path) -> None:
    prof = _profiler(store_root)
    document = "lorem ipsum " * 4000
    echo(document)
    prof.close()
    view = load(store_root)
    ex = view.only()
    output = next(v for v in ex.of(ValueOccurrence) if v.role == ValueRole.OUTPUT)
    assert isinstance(output.value, ValueAvailable) and output.value.encoded_bytes > 32 * 1024
    assert view.value(output.value) == document


def test_a_value_whose_capture_raises_is_recorded_as_omitted(store_root: Path) -> None:
    prof = _profiler(store_root)
    thing = Unencodable()
    assert echo(thing) is thing
    prof.close()
    view = load(store_root)
    ex = view.only()
    assert ex.ended is not None and ex.ended.status == RootStatus.SUCCEEDED
    values = {v.role: view.value(v.value) for v in ex.of(ValueOccurrence)}
    assert set(values[ValueRole.INPUT]["payload"]) == {"$omitted"}
    assert "RuntimeError" in values[ValueRole.INPUT]["payload"]["$omitted"]
    assert prof.stats.internal_errors == 0


def test_full_event_queue_drops_are_counted_per_execution(store_root: Path) -> None:
    prof = _profiler(store_root, max_queued_events=5)
    prof.recorder.wake.clear()
    # the consumer may drain concurrently; hold it off by making the queue tiny and the work large
    assert root(200) == sum(len(str(i)) for i in range(200))
    prof.close()
    view = load(store_root)
    dropped = prof.stats.events_dropped
    assert dropped > 0
    health = [e.ended.health for e in view.executions.values() if e.ended is not None]
    counted = sum(
        h.structural_transport_exceeded + h.value_attempt_transport_exceeded for h in health
    )
    assert counted + sum(h.unmatched_thread_facts for h in health) == dropped


def test_roots_beyond_the_execution_slots_are_dropped_and_counted(store_root: Path) -> None:
    prof = _profiler(store_root, execution_slots=1)
    inside, release = threading.Event(), threading.Event()

    @baml_function(name="losses.Hold")
    def hold() -> str:
        inside.set()
        release.wait(10)
        return "held"

    worker = threading.Thread(target=hold)
    worker.start()
    assert inside.wait(10)
    assert root(2) == 2  # runs unrecorded
    release.set()
    worker.join()
    prof.close()
    assert prof.stats.roots_dropped == 1
    assert len(load(store_root).executions) == 1


def test_exhausted_disk_budget_latches_and_the_app_is_unaffected(store_root: Path) -> None:
    prof = _profiler(store_root, max_project_bytes=4096)
    for _ in range(30):
        assert root(5) == 5
        prof.flush()
    assert prof.store is not None and prof.store.gate == AdmissionGate.DISK
    prof.close()
    stats = prof.stats
    assert stats.cas_lost + stats.data_segments_lost + stats.meta_batch_lost > 0
    scan = StoreReader(store_root).scan()
    assert scan.corruptions == ()
    usage = sum(p.stat().st_size for p in store_root.rglob("*") if p.is_file())
    assert usage <= 4096 + 48


class FullDisk(OsFileSystem):
    """A disk that fills up after ``budget`` bytes of writes."""

    def __init__(self, budget: int) -> None:
        self.left = budget

    def write_all(self, fd: int, data: bytes) -> None:
        if len(data) > self.left:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.left -= len(data)
        super().write_all(fd, data)


def test_enospc_becomes_counted_losses_and_files_stay_whole(store_root: Path) -> None:
    config = ProfilerConfig(store_root=store_root, publish_interval_s=None)
    prof = Profiler(config, fs=FullDisk(6000)).activate()
    results = [root(4) for _ in range(40)]
    assert results == [4] * 40
    prof.close()
    assert prof.store is not None and prof.store.gate == AdmissionGate.DISK
    lost = prof.stats.cas_lost + prof.stats.data_segments_lost + prof.stats.meta_batch_lost
    assert lost > 0
    scan = StoreReader(store_root).scan()
    assert scan.corruptions == ()
    # values whose CAS object could not be written are recorded as lost, never dangling
    view = load(store_root)
    for ex in view.executions.values():
        for occurrence in ex.of(ValueOccurrence):
            if isinstance(occurrence.value, ValueAvailable):
                view.value(occurrence.value)


def test_abandoned_executions_end_at_close(store_root: Path) -> None:
    prof = _profiler(store_root)
    inside, release = threading.Event(), threading.Event()

    @baml_function(name="losses.Forever")
    def forever() -> None:
        inside.set()
        release.wait(10)

    worker = threading.Thread(target=forever)
    worker.start()
    assert inside.wait(10)
    prof.close()
    release.set()
    worker.join()
    ex = load(store_root).only()
    assert ex.ended is not None and ex.ended.status == RootStatus.ABANDONED
    assert len(ex.of(SpanStart)) == 1


def test_an_unopenable_store_makes_every_record_a_counted_loss(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store's parent should be")
    prof = Profiler(ProfilerConfig(store_root=blocker / "profiles-v1")).activate()
    assert prof.open_error is not None and prof.store is None
    assert root(3) == 3
    prof.close()
    assert prof.stats.cas_lost > 0 and prof.stats.internal_errors == 0
    assert blocker.read_text().startswith("a file")


class FlakyCasDirSync(OsFileSystem):
    """``fsync`` of a CAS fan-out directory fails once with EIO: the first single CAS
    publication (an engine's function table) is left indeterminate after its rename."""

    def __init__(self, cas_dir: Path) -> None:
        self.cas_dir = cas_dir
        self.failures = 0

    def fsync_dir(self, path: Path) -> None:
        if path.parent == self.cas_dir and not self.failures:
            self.failures += 1
            raise OSError(errno.EIO, "Input/output error")
        super().fsync_dir(path)


def test_a_transient_failure_of_the_function_table_is_retried_not_announced_away(
    store_root: Path,
) -> None:
    from baml_studio.store import StoreLayout

    fs = FlakyCasDirSync(StoreLayout(store_root).cas_dir)
    config = ProfilerConfig(store_root=store_root, publish_interval_s=None)
    prof = Profiler(config, fs=fs).activate()
    assert [root(2) for _ in range(3)] == [2, 2, 2]
    prof.close()
    assert fs.failures == 1
    assert prof.stats.function_table_publish_retried == 1
    assert prof.stats.function_table_publish_failed == 0
    scan = StoreReader(store_root).scan()
    assert scan.corruptions == ()
    engines = {report.engine for report in scan.executions}
    assert engines and all(e is not None and e.function_table_cid for e in engines)
    for engine in engines:
        assert engine is not None and engine.function_table_cid is not None
        StoreReader(store_root).read_cas(engine.function_table_cid)  # held by the store


class FlakyMetaDirSync(OsFileSystem):
    """``fsync`` of the meta plane's directory fails once with EIO after the first meta
    segment's rename (the first call is the open's own), leaving that segment indeterminate."""

    def __init__(self) -> None:
        self.calls = 0
        self.failed = False

    def fsync_dir(self, path: Path) -> None:
        if path.name == "meta":
            self.calls += 1
            if self.calls == 2:
                self.failed = True
                raise OSError(errno.EIO, "Input/output error")
        super().fsync_dir(path)


def test_an_indeterminate_segment_costs_nothing_else_of_its_cycle(store_root: Path) -> None:
    fs = FlakyMetaDirSync()
    config = ProfilerConfig(store_root=store_root, publish_interval_s=None)
    prof = Profiler(config, fs=fs).activate()
    assert [root(2) for _ in range(3)] == [2, 2, 2]
    prof.close()
    assert fs.failed
    stats = prof.stats
    # the indeterminate meta segment was renamed: resolved, it stays; the data segments and
    # the closing meta segment of the same cycle are published, not blocked and lost
    assert (stats.data_segments_lost, stats.root_ended_lost, stats.cas_lost) == (0, 0, 0)
    assert stats.function_table_publish_failed == 0
    scan = StoreReader(store_root).scan()
    assert scan.corruptions == ()
    assert len(scan.executions) == 3
    assert all(r.started is not None and r.ended is not None for r in scan.executions)


def test_an_internal_error_publishing_root_started_loses_it_openly(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error while publishing a cycle's RootStarted records (counted as an
    internal error; the app is unaffected) is a failed publication: the RootEnded says its
    RootStarted was lost, and the engine is announced in a later meta object, as when the
    store refuses the batch. Nothing is dropped without a trace."""
    prof = _profiler(store_root)
    consumer = prof.consumer
    publish_meta = consumer._publish_meta
    failed: list[object] = []

    def failing(records: list[object]) -> bool:
        if not failed and any(isinstance(r, RootStarted) for r in records):
            failed.append(records)
            raise RuntimeError("injected: the meta batch could not be encoded")
        return publish_meta(records)  # type: ignore[arg-type]

    monkeypatch.setattr(consumer, "_publish_meta", failing)
    assert root(3) == 3
    prof.flush()
    assert root(2) == 2
    prof.close()
    assert failed and prof.stats.internal_errors == 1
    view = load(store_root)
    assert len(view.engines) == 1  # announced in the next cycle
    ended = [ex.ended for ex in view.executions.values()]
    assert len(ended) == 2 and all(e is not None for e in ended)
    lost = [e for e in ended if e is not None and e.flags & ROOT_ENDED_FLAG_ROOT_STARTED_LOST]
    started = [ex for ex in view.executions.values() if ex.started is not None]
    assert len(lost) == 1 and len(started) == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
@pytest.mark.filterwarnings("ignore:lance is not fork-safe")  # other tests of the worker load it
def test_a_forked_child_runs_unprofiled_until_it_starts_a_profiler_of_its_own(
    tmp_path: Path,
) -> None:
    """The child inherited an active profiler without its consumer thread: its calls queued
    events nobody applied, lost without a count."""
    from baml_studio.profiler import api

    store_root = tmp_path / "store"
    prof = _profiler(store_root)
    assert root(1) == 1
    queued = len(prof.recorder.events)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        ok = False
        try:
            ok = api.active() is None and root(2) == 2 and len(prof.recorder.events) == queued
            own = Profiler(ProfilerConfig(store_root=store_root, publish_interval_s=None))
            own.activate()
            ok = ok and root(3) == 3 and own.close(timeout=60)
        finally:
            os.write(write_end, b"1" if ok else b"0")
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 1)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert prof.close(timeout=60)
    view = load(store_root)
    calls = sorted(ex.ended.status == RootStatus.SUCCEEDED for ex in view.executions.values()
                   if ex.ended)  # fmt: skip
    assert calls == [True, True]  # the parent's root(1) and the child's own root(3)


def test_a_second_start_closes_the_first_profiler(tmp_path: Path) -> None:
    """The first profiler's stream and consumer thread stayed open until exit, and ``stop()``
    closed only the second."""
    from baml_studio.profiler import api

    first = api.start(ProfilerConfig(store_root=tmp_path / "one", publish_interval_s=None))
    try:
        assert root(1) == 1
        second = api.start(ProfilerConfig(store_root=tmp_path / "two", publish_interval_s=None))
        assert first._closed and (first._thread is None or not first._thread.is_alive())
        assert api.active() is second
        assert root(2) == 2
    finally:
        api.stop(timeout=60)
    assert api.active() is None
    assert len(load(tmp_path / "one").executions) == 1
    assert len(load(tmp_path / "two").executions) == 1
