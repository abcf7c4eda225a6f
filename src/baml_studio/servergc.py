"""Garbage-collector settings for long-running servers (``serve control``, ``serve dataplane``)
and the projector's processes (``projector``, its ``--processes`` helpers, the Lambda entry
points' execution environments).

:func:`tune_for_serving` runs once startup is done (:func:`tuned_for_serving` around a command
that tests run in their own process):

* ``gc.freeze()`` moves every object startup built (modules, compiled queries, warmed caches)
  into the permanent generation, so a full collection does not walk them while a request waits
  (on the control plane, a ~100 ms stall every few resident queries before this);
* :data:`THRESHOLDS` collect the young generation every 50,000 net allocations instead of 700.
  A query that decodes 14,000 value bodies allocates about a million containers; with the
  defaults it spent ~110 collections and 250–300 ms in them (s3 of
  ``benchmarks/query_workload.py``, warm: ~1,100 ms → ~700 ms with these thresholds). Cycles
  still get collected, later; a query's own objects are freed by reference counting.
  The projector folds each execution into thousands of short-lived dicts and records; with the
  defaults a 100,000-call arrival replay (``benchmarks/projection.py``) spent 10.9 of its
  in-process projector's 50.7 CPU s in collections (48 full ones, ~190 ms each, walking
  everything the process holds) and 3.3 of a helper process's 21.0; with these settings 1.9 and
  0.7 (docs/benchmarks.md, Projection, "2026-12-06 morning").

Libraries and one-shot commands keep Python's defaults.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

THRESHOLDS = (50_000, 20, 20)


def tune_for_serving() -> None:
    """Freeze what exists now and raise the collection thresholds (see the module doc)."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


@contextlib.contextmanager
def tuned_for_serving() -> Iterator[None]:
    """:func:`tune_for_serving` for the block; afterwards the previous thresholds again and
    every frozen object unfrozen, so a command run in-process (as tests run the CLI) leaves
    its caller's collector as it found it (if the caller had frozen nothing itself)."""
    before = gc.get_threshold()
    tune_for_serving()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
