"""Numbers read from what a peer sent (an HTTP header, a JSON value), with no untyped failure.

``str.isdigit`` accepts characters that ``int`` refuses (``"²"``, ``"¹⁰"``), and ``int`` and
``float`` read non-ASCII decimal digits (``"٣"``, fullwidth ``"３"``) that no protocol here
allows; ``float`` of a JSON integer past about 1.8e308 raises ``OverflowError``. These helpers
answer ``None`` for all of that, so that each caller raises its own typed error (or falls back
to its default) naming the value.
"""

from __future__ import annotations

import math


def ascii_whole_number(text: str, *, max_digits: int) -> int | None:
    """``text`` as a whole number when it is 1 to ``max_digits`` ASCII digits ``0``–``9``
    (no sign, no spaces, no other digits); None otherwise."""
    if 0 < len(text) <= max_digits and text.isascii() and text.isdigit():
        return int(text)
    return None


def finite_float(value: int | float) -> float | None:
    """``value`` as a finite float; None for NaN, an infinity, or an integer too large for a
    float (``float(10**400)`` raises ``OverflowError``)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
