"""Decorated functions the catalog tests profile (registered once, at import)."""

from __future__ import annotations

import asyncio
import threading

from baml_studio.profiler import baml_function, capture


class ExtractionError(Exception):
    def __init__(self, message: str, invoice_id: str) -> None:
        super().__init__(message)
        self.invoice_id = invoice_id


@baml_function(name="cat.normalize")
def normalize(x: float) -> float:
    return round(x, 2)


@baml_function(name="cat.Extract", llm=True)
def extract(document: str, strict: bool = False) -> dict[str, object]:
    if strict and "bad" in document:
        raise ExtractionError(f"cannot read {document}", invoice_id="INV-9")
    return {"id": "INV-1042", "total": normalize(12.345)}


@baml_function(name="cat.Process")
def process(documents: list[str], strict: bool = False) -> list[object]:
    return [extract(doc, strict=strict) for doc in documents]


@baml_function(name="cat.Score", llm=True)
async def score(customer: dict[str, object]) -> int:
    await asyncio.sleep(0)
    return len(str(customer["name"]))


@baml_function(name="cat.ScoreAll")
async def score_all(customers: list[dict[str, object]]) -> list[int]:
    return list(await asyncio.gather(*(score(c) for c in customers)))


@baml_function(name="cat.Slow")
async def slow() -> None:
    await asyncio.Event().wait()


@baml_function(name="cat.Cancelled")
async def cancelled_root() -> None:
    task = asyncio.ensure_future(slow())
    await asyncio.sleep(0)
    task.cancel()
    await task


@baml_function(name="cat.Manual")
def manual() -> float:
    with capture(inputs=True):
        return normalize(1.005)


@baml_function(name="cat.Alpha")
def alpha(tag: str) -> list[object]:
    return [extract(tag)]


@baml_function(name="cat.Beta")
def beta(reached: threading.Event, release: threading.Event) -> list[object]:
    first = extract("before")
    reached.set()
    release.wait(30)
    return [first, extract("after")]


@baml_function(name="cat.Delta")
def delta() -> list[object]:
    return [extract("delta")]


@baml_function(name="cat.Gamma")
def gamma() -> list[object]:
    return [extract("gamma")]
