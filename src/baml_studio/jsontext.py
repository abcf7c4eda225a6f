"""Parsing JSON that comes from outside the process (a request body, an object in a bucket, a file
on disk) so that no text, however hostile, escapes as anything but the caller's typed error.

``json.loads`` refuses bad text with ``ValueError`` (``JSONDecodeError``; ``UnicodeDecodeError``
for bytes that are not UTF-8; an integer of more than 4300 digits), and arrays or objects nested
deeper than the interpreter's recursion limit with ``RecursionError``: ``b"[" * 100_000`` is
100 KB. :func:`parse_json` turns each of them into the error the caller names.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def parse_json(data: str | bytes, fail: Callable[[str], Exception]) -> Any:
    """``json.loads(data)``; when ``data`` is not JSON, not UTF-8 or nests arrays and objects
    too deeply to parse, raises ``fail(reason)`` from the parser's error and nothing else.
    ``reason`` says what is wrong; the caller's message says what the text is and how to fix it.
    """
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise fail(f"arrays or objects nest too deeply to parse ({exc})") from exc
    except ValueError as exc:
        raise fail(str(exc)) from exc
