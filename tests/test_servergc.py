"""``tune_for_serving`` freezes startup's objects and raises the collection thresholds, in the
process that serves (a subprocess here, so the test process keeps its own GC settings);
``tuned_for_serving`` does it for a block and gives the caller's settings back."""

from __future__ import annotations

import gc
import subprocess
import sys

from baml_studio.servergc import THRESHOLDS, tuned_for_serving


def test_tune_for_serving_freezes_and_raises_the_thresholds() -> None:
    code = (
        "import gc; from baml_studio.servergc import tune_for_serving; "
        "before = gc.get_freeze_count(); tune_for_serving(); "
        "print(before, gc.get_freeze_count() > before, *gc.get_threshold())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, frozen, *threshold = out.stdout.split()
    assert before == "0" and frozen == "True"
    assert tuple(int(t) for t in threshold) == THRESHOLDS


def test_tuned_for_serving_gives_the_callers_settings_back() -> None:
    before = (gc.get_freeze_count(), *gc.get_threshold())
    with tuned_for_serving():
        assert gc.get_threshold() == THRESHOLDS
        assert gc.get_freeze_count() > before[0]
    assert (gc.get_freeze_count(), *gc.get_threshold()) == before
