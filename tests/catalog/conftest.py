from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import pytest
from catalog_helpers import profile
from catalog_program import (
    ExtractionError,
    alpha,
    beta,
    cancelled_root,
    delta,
    gamma,
    manual,
    process,
    score_all,
)

from baml_studio.profiler import Profiler


def _segmented(profiler: Profiler) -> None:
    alpha("a")
    assert profiler.flush()
    reached, release = threading.Event(), threading.Event()
    worker = threading.Thread(target=beta, args=(reached, release))
    worker.start()
    assert reached.wait(30)
    assert profiler.flush()  # Beta's first group and its RootStarted
    delta()
    assert profiler.flush()  # Delta alone, inside Beta's range
    release.set()
    worker.join(30)
    assert profiler.flush()  # Beta's second group and its RootEnded
    gamma()


@pytest.fixture(scope="session")
def segmented_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Alpha; Beta over three data segments with Delta alone in the middle one; Gamma.
    Do not modify: damage a copy (``copy_store``)."""
    root = tmp_path_factory.mktemp("segmented") / ".baml" / "profiles-v1"
    profile(root, _segmented)
    return root


def _mixed(profiler: Profiler) -> None:
    process(["a", "b"])
    with contextlib.suppress(ExtractionError):
        process(["ok", "bad one"], strict=True)
    asyncio.run(score_all([{"name": "Ada"}, {"name": "Grace"}]))
    manual()
    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(cancelled_root())


@pytest.fixture(scope="session")
def mixed_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five executions: nested calls, a failure, asyncio spawns, a manual capture, a
    cancellation. Do not modify."""
    root = tmp_path_factory.mktemp("mixed") / ".baml" / "profiles-v1"
    profile(root, _mixed)
    return root
