"""The settings a caller query runs with: its budgets, capped, then ``readonly=1`` (pure).

clickhouse-connect's chDB backend applies settings as ``SET`` statements in dict order on the
client's session, and ``readonly=1`` forbids every later ``SET``, so ``readonly`` goes last
(a server takes them per request; the order is harmless there).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from baml_studio.control.facts.config import QueryCaps
from baml_studio.control.facts.errors import QueryRejected

SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

SettingValue = int | float | str


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
