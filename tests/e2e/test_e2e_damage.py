"""Damage is reported, never hidden: in threads, in health, and in the outcome; the other
executions still answer."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from baml_studio.catalog.local import LocalStoreSource
from baml_studio.format.records import RootEnded
from baml_studio.profiler import Profiler, ProfilerConfig, baml_function
from baml_studio.query import QueryEngine
from baml_studio.store import StoreReader

ROOTS = "SELECT execution_id, status, index_state, data_first_seq, data_last_seq FROM threads "
ROOTS += "WHERE parent_thread_id IS NULL"


def _query(root: Path, sql: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    result = QueryEngine(LocalStoreSource(root)).execute(sql)
    rows = list(result)
    return rows, result.outcome()


@baml_function(name="Step", llm=True)
def step(customer: dict[str, Any]) -> int:
    return int(customer["age"]) * 2


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 executions in many data segments; every third one spans two segments."""
    root = tmp_path_factory.mktemp("damage") / "pristine" / "profiles-v1"
    prof = Profiler(ProfilerConfig(store_root=root, publish_interval_s=None)).activate()

    @baml_function(name="Job")
    def job(index: int) -> int:
        total = step({"name": f"c{index}", "age": 20 + index})
        if index % 3 == 0:
            prof.flush()  # this execution's data now spans two segments
        return total + step({"name": f"d{index}", "age": 30 + index})

    for index in range(60):
        job(index)
        if index % 5 == 4:
            prof.flush()
    prof.close()
    return root


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "profiles-v1"
    shutil.copytree(pristine, copy)
    return copy


def _segments(root: Path, plane: str) -> list[Path]:
    return sorted(root.glob(f"streams/*/{plane}/*.bamldata" if plane == "data" else
                            f"streams/*/{plane}/*.bamlmeta"))  # fmt: skip


def _covering(rows: list[dict[str, Any]], seq: int) -> set[str]:
    return {r["execution_id"] for r in rows if r["data_first_seq"] <= seq <= r["data_last_seq"]}


def test_a_pristine_store_is_complete(store: Path) -> None:
    rows, outcome = _query(store, ROOTS)
    assert len(rows) == 60 and {r["index_state"] for r in rows} == {"complete"}
    assert len(_segments(store, "data")) > 3
    _, outcome = _query(store, "SELECT count(*) n FROM calls")
    assert outcome["resultState"] == "complete"


@pytest.mark.parametrize("damage", ["delete", "corrupt"])
def test_a_missing_or_corrupt_data_segment(store: Path, damage: str) -> None:
    before, _ = _query(store, ROOTS)
    victim = _segments(store, "data")[len(_segments(store, "data")) // 2]
    seq = int(victim.stem)
    if damage == "delete":
        victim.unlink()
    else:
        raw = bytearray(victim.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        victim.write_bytes(bytes(raw))
    hit = _covering(before, seq)
    assert hit
    issue = f"{'MissingDataSegment' if damage == 'delete' else 'CorruptDataSegment'}({seq})"
    health, _ = _query(store, "SELECT execution_id, reason FROM health WHERE metric = 'data_issue'")
    assert {r["execution_id"] for r in health if r["reason"] == issue} == hit
    state, _ = _query(store, "SELECT execution_id, reason FROM health WHERE metric = 'data_state'")
    assert {r["execution_id"] for r in state if r["reason"] == "incomplete"} == hit
    calls, outcome = _query(store, "SELECT DISTINCT execution_id FROM calls")
    assert outcome["resultState"] == "incomplete"
    reason = "lost" if damage == "delete" else "corrupt"
    assert outcome["valueEvaluations"]["byReason"] == {reason: len(hit)}
    others = {r["execution_id"] for r in before} - hit
    assert others <= {r["execution_id"] for r in calls}
    scoped, outcome = _query(
        store, f"SELECT count(*) n FROM calls WHERE execution_id = '{sorted(others)[0]}'"
    )
    assert outcome["resultState"] == "complete" and scoped[0]["n"] >= 1


def test_a_missing_root_ended(store: Path) -> None:
    reader = StoreReader(store)
    (euid,) = reader.list_streams()
    victim, ended = None, set()
    for seq in reversed(reader.meta_sequences(euid)):
        records = reader.read_meta(euid, seq).records
        ended = {r.root.wire() for r in records if isinstance(r, RootEnded)}
        if ended and seq != 1:
            victim = store / "streams" / euid.hex() / "meta" / f"{seq:020d}.bamlmeta"
            break
    assert victim is not None
    victim.unlink()
    rows, _ = _query(store, ROOTS)
    by_id = {r["execution_id"]: r for r in rows}
    for execution in ended:
        if execution in by_id:
            assert by_id[execution]["status"] == "abandoned"
            assert by_id[execution]["index_state"] in {"no_root_ended", "index_corrupt"}
    assert any(r["index_state"] == "complete" for r in rows)
    health, _ = _query(
        store, "SELECT execution_id FROM health WHERE metric = 'data_issue' "
        "AND reason = 'NoRootEnded'"
    )  # fmt: skip
    assert {r["execution_id"] for r in health} == ended & set(by_id)
    _, outcome = _query(store, "SELECT count(*) FROM call_path_stats")
    assert outcome["resultState"] == "incomplete"
    assert outcome["valueEvaluations"]["byReason"].get("lost", 0) >= len(ended & set(by_id))


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from baml_studio.profiler import Profiler, ProfilerConfig, baml_function

    @baml_function(name="Work", llm=True)
    async def work(i: int) -> int:
        await asyncio.sleep(0)
        return i

    @baml_function(name="Root")
    async def root(i: int) -> list:
        return await asyncio.gather(*(work(i * 10 + k) for k in range(3)))

    @baml_function(name="Forever")
    async def forever() -> None:
        await asyncio.Event().wait()

    async def main() -> None:
        prof = Profiler(ProfilerConfig(store_root=Path(sys.argv[1]), publish_interval_s=0.0,
                                       wake_interval_s=0.001)).activate()
        hang = asyncio.ensure_future(forever())
        for i in range(30):
            await root(i)
        prof.flush()
        print("ready", flush=True)
        await hang

    asyncio.run(main())
    """
)


def test_a_killed_process(tmp_path: Path) -> None:
    root = tmp_path / "profiles-v1"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(root)], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
    rows, _ = _query(root, ROOTS)
    states = {(r["status"], r["index_state"]) for r in rows}
    assert ("abandoned", "no_root_ended") in states
    assert sum(1 for r in rows if r["status"] == "succeeded") == 30
    _, outcome = _query(root, "SELECT fqn, count(*) FROM calls GROUP BY fqn")
    assert outcome["resultState"] == "incomplete"
    assert outcome["valueEvaluations"]["byReason"] == {"lost": 1}
