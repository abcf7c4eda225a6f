"""The settings a caller query runs with: its budgets, capped, then ``readonly=1`` (pure).

They travel in the query's own ``SETTINGS`` clause (:func:`settings_clause`), which binds them
to that one query on ClickHouse and chDB alike: a pooled client keeps no trace of them.
(clickhouse-connect's chDB backend would apply per-call settings as ``SET`` statements on the
client's session and restore them afterwards, two statements per setting, and it cannot restore
anything after ``readonly=1``.) Only :data:`PARSE_SETTINGS` must be known before the query is
parsed, so they go as client settings; ``readonly`` stays last in the clause.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from baml_studio.control.facts.config import QueryCaps
from baml_studio.control.facts.errors import QueryRejected

SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

SettingValue = int | float | str

PARSE_SETTINGS = frozenset({"max_query_size"})
"""Settings the server needs before it parses the query: they cannot be in its clause."""


def budget_settings(
    settings: Mapping[str, SettingValue], caps: QueryCaps
) -> dict[str, SettingValue]:
    """The caller's settings in their order, each capped budget lowered to its cap (a missing
    budget, or ``0`` meaning unlimited, becomes the cap), then ``readonly=1``. A caller's
    ``readonly`` is dropped: every query is read-only."""
    effective: dict[str, SettingValue] = {}
    for name, value in settings.items():
        if not isinstance(name, str) or not SETTING_NAME.fullmatch(name):
            raise QueryRejected(
                f"setting name {name!r} is not a ClickHouse setting name: use letters, digits "
                "and '_' (e.g. 'max_rows_to_read')",
                details={"setting": str(name)},
            )
        if name == "readonly":
            continue
        if not isinstance(value, int | float | str):
            raise QueryRejected(
                f"setting {name}={value!r} must be an int, float or str",
                details={"setting": name},
            )
        effective[name] = int(value) if isinstance(value, bool) else value
    for name, cap in caps.as_settings().items():
        given = effective.get(name)
        effective[name] = _capped(name, given, cap)
    effective["readonly"] = 1
    return effective


def _capped(name: str, given: SettingValue | None, cap: int | float) -> int | float:
    if given is None:
        return cap
    try:
        value = float(given)
    except ValueError:
        raise QueryRejected(
            f"budget {name}={given!r} is not a number", details={"setting": name}
        ) from None
    if value <= 0 or value > cap:
        return cap
    return int(value) if isinstance(cap, int) and value.is_integer() else value


def settings_clause(settings: Mapping[str, SettingValue]) -> str:
    """`` SETTINGS name = value, …`` for ``settings`` outside :data:`PARSE_SETTINGS`, in order
    (``""`` if none). Names must match :data:`SETTING_NAME`; strings are quoted literals."""
    parts = []
    for name, value in settings.items():
        if name in PARSE_SETTINGS:
            continue
        if not SETTING_NAME.fullmatch(name):
            raise QueryRejected(f"setting name {name!r} is not a ClickHouse setting name")
        parts.append(f"{name} = {_setting_literal(value)}")
    return f" SETTINGS {', '.join(parts)}" if parts else ""


def parse_settings(settings: Mapping[str, SettingValue]) -> dict[str, SettingValue]:
    """The members of :data:`PARSE_SETTINGS` in ``settings``."""
    return {name: value for name, value in settings.items() if name in PARSE_SETTINGS}


def _setting_literal(value: SettingValue) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QueryRejected(f"setting value {value!r} is not a finite number")
        return repr(value)
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"
