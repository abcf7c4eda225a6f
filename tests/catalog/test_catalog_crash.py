"""A process killed with SIGKILL: its open executions turn from running to abandoned."""

from __future__ import annotations

from pathlib import Path

from catalog_helpers import data_rows, plain

from baml_studio.catalog import LocalStoreSource
from stuck_profiler import stuck_profiler


def roots(source: LocalStoreSource) -> dict[str, dict[str, object]]:
    threads = plain(source.tables(["threads_v1"], None)["threads_v1"])
    return {
        str(r["entry_fqn"]) + ":" + str(r["execution_id"]): r
        for r in threads
        if r["parent_thread_id"] is None
    }


def test_sigkill_leaves_open_executions_abandoned(tmp_path: Path) -> None:
    root = tmp_path / ".baml" / "profiles-v1"
    with stuck_profiler(root, "crash") as child:
        live = LocalStoreSource(root)
        (process,) = plain(live.tables(["processes_v1"], None)["processes_v1"])
        assert process["alive"] is True and process["os_pid"] == child.pid
        before = roots(live)
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
