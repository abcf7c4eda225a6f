"""Just enough of openapi.yaml for the query outcome: a YAML-subset reader and a validator.

PyYAML is not installed, so this reads the indentation-structured subset the spec uses
(mappings, lists, plain and quoted scalars, folded continuation lines) for the schemas under
``components.schemas``, and validates JSON-able data against ``type``, ``required``,
``properties``, ``additionalProperties``, ``enum``, ``minimum`` and ``$ref``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SPEC = Path(os.environ.get("BAML_SPEC_DIR", "/work/shared/spec")) / "openapi.yaml"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _scalar(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    if text in ("null", "~"):
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    try:
        return int(text)
    except ValueError:
        return text


def _block(lines: list[str], i: int, indent: int) -> tuple[Any, int]:
    if lines[i].strip().startswith("- "):
        items: list[Any] = []
        while i < len(lines) and _indent(lines[i]) == indent and lines[i].strip()[:2] == "- ":
            rest = lines[i].strip()[2:]
            if ": " in rest or rest.endswith(":"):
                lines[i] = " " * (indent + 2) + rest  # a mapping item: re-read it as a mapping
                item, i = _block(lines, i, indent + 2)
            else:
                item, i = _scalar(rest), _skip(lines, i + 1, indent)
            items.append(item)
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and _indent(lines[i]) == indent and lines[i].strip()[:2] != "- ":
        key, _, rest = lines[i].strip().partition(":")
        rest = rest.strip()
        if rest:
            mapping[key.strip().strip("'\"")], i = _scalar(rest), _skip(lines, i + 1, indent)
            continue
        i += 1
        if i < len(lines) and (_indent(lines[i]) > indent or lines[i].strip().startswith("- ")):
            mapping[key], i = _block(lines, i, _indent(lines[i]))
        else:
            mapping[key] = None
    return mapping, i


def _skip(lines: list[str], i: int, indent: int) -> int:
    """Skip continuation lines of a folded scalar."""
    while i < len(lines) and _indent(lines[i]) > indent and not lines[i].strip().startswith("- "):
        i += 1
    return i


def load_schemas(path: Path = SPEC) -> dict[str, Any]:
    lines = [
        ln.rstrip()
        for ln in path.read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.lstrip().startswith("#")
    ]
    start = lines.index("  schemas:") + 1
    schemas, _ = _block(lines, start, 4)
    return dict(schemas)


def validate(data: Any, schema: dict[str, Any], schemas: dict[str, Any], at: str = "$") -> None:
    if "$ref" in schema:
        validate(data, schemas[schema["$ref"].rsplit("/", 1)[-1]], schemas, at)
        return
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(data, dict), f"{at}: expected an object, got {data!r}"
        missing = set(schema.get("required", [])) - set(data)
        assert not missing, f"{at}: missing required {sorted(missing)}"
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties", True)
        for key, value in data.items():
            if key in properties:
                validate(value, properties[key], schemas, f"{at}.{key}")
            elif extra is False:
                raise AssertionError(f"{at}: unexpected property {key!r}")
            elif isinstance(extra, dict):
                validate(value, extra, schemas, f"{at}.{key}")
    elif kind == "integer":
        assert isinstance(data, int) and not isinstance(data, bool), f"{at}: {data!r} not int"
        assert data >= schema.get("minimum", data), f"{at}: {data} below minimum"
    elif kind == "boolean":
        assert isinstance(data, bool), f"{at}: {data!r} is not a boolean"
    elif kind == "string":
        assert isinstance(data, str), f"{at}: {data!r} is not a string"
    if "enum" in schema:
        assert data in schema["enum"], f"{at}: {data!r} not in {schema['enum']}"
