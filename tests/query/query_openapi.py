"""Just enough of openapi.yaml for the query outcome: its schemas, and a validator of
JSON-able data against ``type``, ``required``, ``properties``, ``additionalProperties``,
``enum``, ``minimum`` and ``$ref``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

_BESIDE = Path(__file__).resolve().parents[3] / "shared" / "spec"  # <repo>/../shared/spec
SPEC = Path(os.environ.get("BAML_SPEC_DIR", str(_BESIDE))) / "openapi.yaml"


def load_schemas(path: Path = SPEC) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return dict(document["components"]["schemas"])


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
