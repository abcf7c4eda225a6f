"""Damaging one row of an SQLite state file, for the tests of what reads it back (this module
holds no tests): any value SQLite stores, put into one column of one row."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from hypothesis import assume
from hypothesis import strategies as st

from json_fuzz import JSON_VALUES

SQLITE_VALUES = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.text(max_size=12),
    JSON_VALUES.map(json.dumps),
)
"""What a damaged column may hold: NULL, any 64-bit integer or float, text, JSON text."""


def damage_row(path: Path, table: str, key: tuple[str, str], column: str, value: object) -> None:
    """Set ``column`` of the row of ``table`` whose ``key[0]`` is ``key[1]`` to ``value``;
    a NULL that SQLite refuses (a NOT NULL column) is an example Hypothesis discards."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(f"UPDATE {table} SET {column} = ? WHERE {key[0]} = ?", (value, key[1]))
    except sqlite3.IntegrityError:
        assume(False)
    finally:
        conn.close()
