"""Which environments have an evidence prefix (are provisioned for uploads).

A token whose environment is not provisioned gets 409 from authorize. Two sources:
:class:`StaticEnvironments` (a fixed set, from configuration) and :class:`EnvironmentsFile`
(``environments.json``, ``{"environments": [{"tenant", "project", "environment"}, ...]}``,
re-read when it changes; ``baml-studio tokens mint`` adds to it).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from baml_studio.gateway.config import Scope
from baml_studio.gateway.errors import DependencyUnavailable
from baml_studio.jsontext import parse_json


class Environments(Protocol):
    def is_provisioned(self, scope: Scope) -> bool:
        """Whether ``scope`` has an evidence prefix."""


class StaticEnvironments:
    def __init__(self, scopes: Iterable[Scope]) -> None:
        self._scopes = frozenset(scopes)

    def is_provisioned(self, scope: Scope) -> bool:
        return scope in self._scopes


class EnvironmentsFile:
    """The provisioned environments in a JSON file, cached until the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._scopes: frozenset[Scope] = frozenset()

    def scopes(self) -> frozenset[Scope]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return frozenset()
        except OSError as exc:
            raise DependencyUnavailable(f"cannot read {self.path}: {exc}") from exc
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if stamp != self._stamp:
            try:
                raw = parse_json(self.path.read_text("utf-8"), ValueError)
                self._scopes = frozenset(Scope.from_dict(item) for item in raw["environments"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise DependencyUnavailable(
                    f"environments file {self.path} is unreadable: {exc}; fix or remove it"
                ) from exc
            self._stamp = stamp
        return self._scopes

    def is_provisioned(self, scope: Scope) -> bool:
        return scope in self.scopes()

    def add(self, scope: Scope) -> bool:
        """Provision ``scope``; ``False`` if it already was. Written atomically."""
        current = self.scopes()
        if scope in current:
            return False
        items = [s.as_dict() for s in sorted(current | {scope})]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        with tmp.open("w", encoding="utf-8") as handle:
            json.dump({"environments": items}, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        return True
