"""A process killed with SIGKILL mid-profiling leaves only complete files that all decode."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from readback import load

from baml_studio.store import StoreReader

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from baml_studio.profiler import Profiler, ProfilerConfig, baml_function

    @baml_function(name="crash.Llm", llm=True)
    async def llm(doc: str) -> dict:
        await asyncio.sleep(0)
        return {"doc": doc, "words": doc.split()}

    @baml_function(name="crash.Root")
    async def root(i: int) -> list:
        return await asyncio.gather(*(llm(f"document {i} part {k} " * 40) for k in range(3)))

    prof = Profiler(ProfilerConfig(store_root=Path(sys.argv[1]), publish_interval_s=0.0,
                                   wake_interval_s=0.001)).activate()
    i = 0
    while True:
        asyncio.run(root(i))
        i += 1
        if i % 25 == 0:
            prof.flush()
            print(i, flush=True)
    """
)


def test_sigkill_mid_profiling_leaves_only_whole_files(tmp_path: Path) -> None:
    root = tmp_path / ".baml" / "profiles-v1"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        for _ in range(4):  # four flushes published: the child is busy writing
            assert child.stdout.readline().strip(), "child exited early"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    reader = StoreReader(root)
    scan = reader.scan()
    assert scan.corruptions == ()
    assert reader.check_cas().corruptions == ()
    (stream,) = scan.streams
    assert not stream.alive
    assert stream.meta_gaps == () and stream.data_gaps == ()
    ended = [e for e in scan.executions if e.ended is not None]
    assert len(ended) >= 100
    assert all(e.started is not None for e in ended)
    finals = [p for p in root.rglob("*") if p.is_file() and p.parent.name != "tmp"]
    assert not [p for p in finals if p.suffix == ".pending"]
    view = load(root)
    for execution in view.executions.values():
        if execution.ended is not None:
            assert execution.ended.data_last_seq <= stream.data_high_water
