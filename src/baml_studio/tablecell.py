"""A query result's value as one cell of the ``table`` format, for the local and the remote
``baml-studio query`` alike. Its own module so the remote CLI renders rows without importing
the query engine (DataFusion)."""

from __future__ import annotations

import json
from typing import Any

CELL_WIDTH = 60
"""Characters a cell shows before it is cut with ``…``."""

_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
_CONTROL_ESCAPES = {
    code: _SHORT_ESCAPES.get(chr(code), f"\\x{code:02x}")
    for code in (*range(0x20), 0x5C, *range(0x7F, 0xA0))
}
"""C0 and C1 control characters and DEL as escapes, and the backslash doubled so an escape
reads back unambiguously: a cell is one line, and captured text (LLM output, say) cannot send
the terminal escape sequences."""
_JSON_ESCAPES = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}
"""What JSON text leaves bare of those (it escapes C0 and the backslash itself)."""


def table_cell(value: Any, width: int = CELL_WIDTH) -> str:
    """A row value as a table cell: strings bare (control characters escaped,
    :data:`_CONTROL_ESCAPES`), NULL, JSON otherwise, cut at ``width``."""
    if value is None:
        text = "NULL"
    elif isinstance(value, str):
        text = value.translate(_CONTROL_ESCAPES)
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        text = text.translate(_JSON_ESCAPES)
    return text if len(text) <= width else text[: width - 1] + "…"
