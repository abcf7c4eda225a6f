"""A process killed with SIGKILL: its open executions turn from running to abandoned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from catalog_helpers import data_rows, plain

from baml_studio.catalog import LocalStoreSource

CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    from baml_studio.profiler import Profiler, ProfilerConfig, baml_function

    @baml_function(name="crash.Llm", llm=True)
    def llm(doc: str) -> str:
        return doc.upper()

    @baml_function(name="crash.Done")
    def done(i: int) -> str:
        return llm(f"document {i}")

    @baml_function(name="crash.Stuck")
    def stuck(started: threading.Event) -> None:
        llm("before")
        started.set()
        threading.Event().wait()

    prof = Profiler(ProfilerConfig(store_root=Path(sys.argv[1]), publish_interval_s=0.0,
                                   wake_interval_s=0.001)).activate()
    for i in range(3):
        done(i)
    started = threading.Event()
    threading.Thread(target=stuck, args=(started,), daemon=True).start()
    started.wait(30)
    prof.flush()
    print("ready", flush=True)
    time.sleep(120)
    """
)


def roots(source: LocalStoreSource) -> dict[str, dict[str, object]]:
    threads = plain(source.tables(["threads_v1"], None)["threads_v1"])
    return {
        str(r["entry_fqn"]) + ":" + str(r["execution_id"]): r
        for r in threads
        if r["parent_thread_id"] is None
    }


def test_sigkill_leaves_open_executions_abandoned(tmp_path: Path) -> None:
    root = tmp_path / ".baml" / "profiles-v1"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", "child exited early"
        live = LocalStoreSource(root)
        (process,) = plain(live.tables(["processes_v1"], None)["processes_v1"])
        assert process["alive"] is True and process["os_pid"] == child.pid
        before = roots(live)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    stuck = [r for key, r in before.items() if key.startswith("crash.Stuck")]
    assert [(r["status"], r["index_state"]) for r in stuck] == [("running", "no_root_ended")]
    dead = LocalStoreSource(root)
    after = roots(dead)
    assert sorted(after) == sorted(before)
    health = plain(dead.tables(["health_v1"], None)["health_v1"])
    for key, row in after.items():
        if key.startswith("crash.Stuck"):
            assert (row["status"], row["index_state"]) == ("abandoned", "no_root_ended")
            assert row["calls_retained"] == 2 and row["ended_ns"] is None
            assert data_rows(health, str(row["execution_id"])) == [
                ("data_state", 0, "incomplete"),
                ("data_issue", 1, "NoRootEnded"),
            ]
        else:
            assert key.startswith("crash.Done")
            assert (row["status"], row["index_state"]) == ("succeeded", "complete")
            assert data_rows(health, str(row["execution_id"])) == [("data_state", 1, "complete")]
    assert len(after) == 4
    (process,) = plain(dead.tables(["processes_v1"], None)["processes_v1"])
    assert process["alive"] is False
