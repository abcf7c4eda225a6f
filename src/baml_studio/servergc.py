"""Garbage-collector settings for long-running servers (``serve control``, ``serve dataplane``).

:func:`tune_for_serving` runs once startup is done:

* ``gc.freeze()`` moves every object startup built (modules, compiled queries, warmed caches)
  into the permanent generation, so a full collection does not walk them while a request waits
  (on the control plane, a ~100 ms stall every few resident queries before this);
* :data:`THRESHOLDS` collect the young generation every 50,000 net allocations instead of 700.
  A query that decodes 14,000 value bodies allocates about a million containers; with the
  defaults it spent ~110 collections and 250–300 ms in them (s3 of
  ``benchmarks/query_workload.py``, warm: ~1,100 ms → ~700 ms with these thresholds). Cycles
  still get collected, later; a query's own objects are freed by reference counting.

Libraries and one-shot commands keep Python's defaults.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 20)


def tune_for_serving() -> None:
    """Freeze what exists now and raise the collection thresholds (see the module doc)."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
