"""A profiler process SIGKILLed mid-execution, shared by the catalog's, the sweep's and the
scheduled maintenance's tests.

``with stuck_profiler(root, "crash") as child:`` starts a child process whose profiler (store at
``root``) ran three roots ``<prefix>.Done`` to the end and one, ``<prefix>.Stuck``, that waits
forever after its first LLM call; the block starts once the child has flushed (RootStarted and
data shipped, no RootEnded for the stuck one). The child is SIGKILLed when the block ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    from baml_studio.profiler import Profiler, ProfilerConfig, baml_function

    @baml_function(name="PREFIX.Llm", llm=True)
    def llm(doc: str) -> str:
        return doc.upper()

    @baml_function(name="PREFIX.Done")
    def done(i: int) -> str:
        return llm(f"document {i}")

    @baml_function(name="PREFIX.Stuck")
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


@contextmanager
def stuck_profiler(root: Path, prefix: str) -> Iterator[subprocess.Popen[str]]:
    """The running child, flushed and ready (module docstring); SIGKILLed at the end."""
    script = root.parent / f"{prefix}-child.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(_CHILD.replace("PREFIX", prefix))
    child = subprocess.Popen(
        [sys.executable, str(script), str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", "child exited early"
        yield child
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
