"""Instrumentation of the coordinator's Lance reads, independent of its own counters: a
:class:`~baml_studio.projector.lance_store.PrivateStore` proxy that records every scan."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from baml_studio.projector.lance_store import PrivateStore


@dataclass
class Scan:
    dataset: str
    version: int | None
    columns: list[str]
    filter: str | None
    rows: int
    execution_ids: set[str] = field(default_factory=set)
    cids: set[str] = field(default_factory=set)
    thread: str = ""


class ProbedStore:
    """Delegates to ``store``; ``scans`` lists every ``to_table`` of a dataset it opened."""

    def __init__(self, store: PrivateStore) -> None:
        self._store = store
        self.scans: list[Scan] = []

    def open_dataset(self, name: str, *, version: int | None = None) -> Any:
        dataset = self._store.open_dataset(name, version=version)
        return None if dataset is None else _ProbedDataset(self, name, version, dataset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def data_scans(self) -> list[Scan]:
        return list(self.scans)


class _ProbedDataset:
    def __init__(self, probe: ProbedStore, name: str, version: int | None, dataset: Any) -> None:
        self._probe, self._name, self._version, self._dataset = probe, name, version, dataset

    def to_table(self, columns: list[str] | None = None, filter: str | None = None) -> Any:
        table = self._dataset.to_table(columns=columns, filter=filter)
        ids = (
            set(table["execution_id"].to_pylist())
            if "execution_id" in table.column_names
            else set()
        )
        cids = set(table["cid"].to_pylist()) if "cid" in table.column_names else set()
        self._probe.scans.append(
            Scan(
                self._name,
                self._version,
                list(columns or []),
                filter,
                table.num_rows,
                ids,
                cids,
                threading.current_thread().name,
            )
        )
        return table

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dataset, name)
