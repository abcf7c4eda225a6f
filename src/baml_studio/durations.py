"""Durations as people write them on a command line or in a schedule's input.

One grammar for every option and setting that takes a duration (``--max-wall``, ``--interval``,
``--silence``, ``--retention``, ``--ttl``, ``BAML_SILENCE_LIMIT``, ``BAML_VERSION_RETENTION``, the
maintenance schedule's input): numbers with a unit each, added up, or plain seconds::

    1500ms  90  90s  30m  1h30m  1.5h  7d  2w

Units: ``ms``, ``s``, ``m``, ``h``, ``d``, ``w`` (lower or upper case; no spaces inside). A
duration must be finite and positive (or zero where a caller allows it: a poll interval);
anything else raises :class:`ValueError` naming the forms, which each caller words for its own
surface (a ``click.BadParameter``, a typed event error).
"""

from __future__ import annotations

import math
import re

UNIT_SECONDS = {"ms": 0.001, "": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
UNIT_SECONDS["w"] = 7 * 86_400.0
_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_PART = re.compile(rf"({_NUMBER})(ms|[smhdw]?)")
_DURATION = re.compile(rf"(?:{_NUMBER}(?:ms|[smhdw])?)+")
FORMS = "a number with a unit ms, s, m, h, d or w (e.g. 1500ms, 90s, 30m, 1h30m, 7d), or seconds"


def parse_seconds(text: str, *, zero: bool = False) -> float:
    """The seconds ``text`` names (module docstring); ``ValueError`` otherwise. ``zero``
    admits a duration of zero."""
    value = text.strip().lower()
    if not _DURATION.fullmatch(value):
        raise ValueError(f"{text!r} is not a duration: use {FORMS}")
    seconds = math.fsum(float(n) * UNIT_SECONDS[unit] for n, unit in _PART.findall(value))
    if not math.isfinite(seconds):
        raise ValueError(f"duration {text!r} is too long")
    if seconds < 0 or (seconds == 0 and not zero):
        raise ValueError(f"{text!r} is not a positive duration")
    return seconds
