"""A profiler process SIGKILLed mid-execution: three ended roots and one without RootEnded
(the sweep's and the scheduled maintenance's tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from baml_studio.catalog import LocalStoreSource

CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    from baml_studio.profiler import Profiler, ProfilerConfig, baml_function

    @baml_function(name="sweep.Llm", llm=True)
    def llm(doc: str) -> str:
        return doc.upper()

    @baml_function(name="sweep.Done")
    def done(i: int) -> str:
        return llm(f"document {i}")

    @baml_function(name="sweep.Stuck")
    def stuck(started: threading.Event) -> None:
        llm("before the kill")
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


@pytest.fixture
def killed_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three ended roots and one (``sweep.Stuck``) whose process was SIGKILLed after a flush:
    RootStarted and data shipped, no RootEnded. Built per test (a second or two), so its
    records are always seconds old: fresh for a one-hour silence limit."""
    base = tmp_path_factory.mktemp("sweep-killed")
    root = base / ".baml" / "profiles-v1"
    script = base / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", "child exited early"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    return root


def abandoned_ids(root: Path) -> list[str]:
    threads = LocalStoreSource(root).root_threads(columns=["execution_id", "status"])
    return sorted(
        e
        for e, s in zip(
            threads["execution_id"].to_pylist(), threads["status"].to_pylist(), strict=True
        )
        if s == "abandoned"
    )
