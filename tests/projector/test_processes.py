"""The projector on several processes (``projector.processes``, ``projector --processes``):
helpers drain the same queue, a helper that cannot start fails the start, a helper that dies is
started again. ``projector --processes 2 --once`` over the ingest path and SIGTERM with three
processes are in ``test_loop.py`` (``test_cli_once_drains_and_prints_the_counts``,
``test_sigterm_stops_the_service_cleanly``)."""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import multiprocessing
import os
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from projector_control_rig import closed_port_url
from projector_fixtures import SCOPE

from baml_studio.cli_projector import projector_command
from baml_studio.gateway.keys import pack_key
from baml_studio.gateway.service import load_dataplane_config
from baml_studio.objectstore.notifications import s3_event
from baml_studio.projector import loop, processes
from baml_studio.projector.loop import LoopReport
from baml_studio.projector.processes import HelperFailed, run_processes
from baml_studio.projector.service import Projector, ProjectorConfig, open_projector
from baml_studio.projector.worker import WorkerConfig
from baml_studio.servergc import THRESHOLDS


def local_config(tmp_path: Path) -> ProjectorConfig:
    """A data-plane directory whose control plane is never reached."""
    dataplane = load_dataplane_config(tmp_path / "dp", host="127.0.0.1", port=8787)
    return ProjectorConfig(
        dataplane, closed_port_url(), "token", worker=WorkerConfig(retry_backoff_s=(0,))
    )


def send_missing_packs(config: ProjectorConfig, n: int) -> None:
    """``n`` notifications of packs that are not in the bucket (each handled by a delete)."""
    with open_projector(config) as projector:
        for i in range(n):
            key = pack_key(SCOPE, "ab" * 16, f"01J{i:023d}")
            body = s3_event(
                projector.store.bucket, key, 10, "0" * 32, None, None, datetime.now(UTC)
            )
            projector.queue.send(json.dumps(body))


def refuse_to_open(config: ProjectorConfig) -> Projector:
    raise OSError("the bucket is not reachable (test)")


def test_a_helper_drains_the_queue_this_process_shares(tmp_path: Path) -> None:
    config = local_config(tmp_path)
    send_missing_packs(config, 6)
    report = run_processes(
        config,
        stop=threading.Event(),
        processes=2,
        workers=1,
        wait_s=0.2,
        once=True,
        run_here=LoopReport,  # this process takes nothing: only the helper's counts add up
    )
    assert report.loop.worker.messages == report.loop.worker.deleted == 6
    assert report.loop.errors == 0 and report.restarts == 0
    assert report.as_dict()["process_restarts"] == 0
    with open_projector(config) as projector:
        assert projector.queue.approximate_count() == 0


def test_a_helper_that_cannot_open_its_stores_fails_the_start(tmp_path: Path) -> None:
    ran = threading.Event()
    with pytest.raises(HelperFailed, match="not reachable"):
        run_processes(
            local_config(tmp_path),
            stop=threading.Event(),
            processes=3,
            workers=1,
            wait_s=0.2,
            run_here=lambda: (ran.set(), LoopReport())[1],
            opener=refuse_to_open,
        )
    assert not ran.is_set()
    assert multiprocessing.active_children() == []
    with pytest.raises(ValueError, match="processes"):
        run_processes(
            local_config(tmp_path), stop=threading.Event(), processes=0, workers=1, wait_s=0,
            run_here=LoopReport,
        )  # fmt: skip


def test_a_helper_that_dies_is_started_again_and_stopped_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "RESTART_BACKOFF_S", 0.05)
    stop = threading.Event()
    pids: list[int] = []

    def run_here() -> LoopReport:
        first = [p.pid for p in multiprocessing.active_children()]
        assert len(first) == 1 and first[0] is not None
        os.kill(first[0], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            alive = [p for p in multiprocessing.active_children() if p.pid != first[0]]
            if alive and alive[0].pid is not None:
                pids.extend([first[0], alive[0].pid])
                break
            time.sleep(0.05)
        time.sleep(0.5)  # the new helper says ready, then serves
        stop.set()
        return LoopReport()

    report = run_processes(
        local_config(tmp_path),
        stop=stop,
        processes=2,
        workers=1,
        wait_s=0.1,
        run_here=run_here,
        supervise_s=0.05,
    )
    assert len(pids) == 2, "the helper was not started again"
    assert report.restarts == 1
    assert report.loop.errors == 0  # the new helper sent its counts
    assert multiprocessing.active_children() == []


def test_cli_refuses_a_bad_process_count_and_processes_on_an_object_store(
    tmp_path: Path,
) -> None:
    (tmp_path / "dp").mkdir()
    base = ["--data", str(tmp_path / "dp"), "--control-plane", closed_port_url(), "--token", "t"]
    result = CliRunner().invoke(projector_command, [*base, "--processes", "0"])
    assert result.exit_code == 2
    on_s3 = [*base, "--derived", "s3://bucket/derived/v1", "--processes", "2", "--once"]
    result = CliRunner().invoke(projector_command, on_s3)
    assert result.exit_code == 2 and "cannot lock" in result.output
    with pytest.raises(ValueError, match="cannot lock"):
        run_processes(
            dataclasses.replace(local_config(tmp_path), derived_root="s3://b/derived/v1"),
            stop=threading.Event(), processes=2, workers=1, wait_s=0, run_here=LoopReport,
        )  # fmt: skip


def open_and_report_gc(out: Path, config: ProjectorConfig) -> Projector:
    """An opener for a helper that writes its process's collector settings to ``out`` when
    the helper closes its projector (after serving)."""
    projector = open_projector(config)
    close = projector.close

    def report_and_close() -> None:
        out.write_text(json.dumps([gc.get_freeze_count(), *gc.get_threshold()]))
        close()

    projector.close = report_and_close  # type: ignore[method-assign]  # reason: a probe
    return projector


def test_a_helper_serves_with_the_servers_collector_settings(tmp_path: Path) -> None:
    out = tmp_path / "helper-gc.json"
    run_processes(
        local_config(tmp_path),
        stop=threading.Event(),
        processes=2,
        workers=1,
        wait_s=0.1,
        once=True,
        run_here=LoopReport,
        opener=functools.partial(open_and_report_gc, out),
    )
    frozen, *threshold = json.loads(out.read_text())
    assert frozen > 0  # what it built at start is out of the collector's way
    assert tuple(threshold) == THRESHOLDS


def test_the_cli_serves_with_the_servers_collector_settings_and_restores_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, ...]] = []

    def run_projector(projector: Projector, **_: object) -> LoopReport:
        seen.append((gc.get_freeze_count(), *gc.get_threshold()))
        return LoopReport()

    monkeypatch.setattr(loop, "run_projector", run_projector)
    before = (gc.get_freeze_count(), *gc.get_threshold())
    (tmp_path / "dp").mkdir()
    base = ["--data", str(tmp_path / "dp"), "--control-plane", closed_port_url(), "--token", "t"]
    result = CliRunner().invoke(projector_command, [*base, "--once"])
    assert result.exit_code == 0, result.output
    assert len(seen) == 1
    assert seen[0][0] > before[0] and seen[0][1:] == THRESHOLDS
    assert (gc.get_freeze_count(), *gc.get_threshold()) == before  # this process's own again
