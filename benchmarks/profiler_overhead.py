"""Cost per call of the in-process profiler, against no profiler and against an OpenTelemetry span.

Two cases, each run unprofiled (decorated, no active profiler), profiled (a real Profiler writing
a temp store) and traced (OpenTelemetry SDK: TracerProvider + BatchSpanProcessor +
InMemorySpanExporter):

* ``captured``: an LLM-style function (``llm=True``) taking a structured invoice (dataclass,
  nested customer, enums, line items) and returning a dict. The profiler captures its input and
  output; the span carries the JSON-serialised arguments and output as attributes.
* ``plain``: an ordinary helper called inside a root. The profiler only counts it in the
  calling-context tree; the span carries the function name only.

Calls run inside roots (executions) of ``--captured-batch`` / ``--plain-batch`` calls each, the
same in every mode; a root's own cost (its captured arguments) is included. "app" is the
time on the calling thread; "+flush" adds the final ``Profiler.flush()`` / ``force_flush()``
(everything published or exported), divided by the call count. Every call gets a different
invoice, so nothing is deduplicated. Each mode runs ``--reps`` times in rotation; the table shows
medians. The goal (from the issue): a captured call costs at most one third of an OpenTelemetry
span, compared here as added cost over the unprofiled call.

Run: ``.venv/bin/python benchmarks/profiler_overhead.py``
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import gc
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from baml_studio.format.values import encode_python
from baml_studio.profiler import Profiler, ProfilerConfig, baml_function

GOAL = 1 / 3
STORE_PARENT: str | None = None
"""Where the profiled runs put their temp store (``--store-parent``; default: the temp dir)."""


class Currency(enum.Enum):
    USD = "USD"
    EUR = "EUR"
    GBP = "GBP"


class Tier(enum.Enum):
    FREE = "free"
    PRO = "pro"
    ENTERPRISE = "enterprise"


@dataclass(frozen=True, slots=True)
class Customer:
    customer_id: str
    name: str
    age: int
    tier: Tier


@dataclass(frozen=True, slots=True)
class LineItem:
    sku: str
    description: str
    quantity: int
    unit_price: float


@dataclass(frozen=True, slots=True)
class Invoice:
    invoice_id: str
    customer: Customer
    currency: Currency
    issued_on: str
    line_items: tuple[LineItem, ...]
    notes: str


def make_invoices(count: int, seed: int) -> list[Invoice]:
    rng = random.Random(seed)
    names = ("Ada Lovelace", "Grace Hopper", "Alan Turing", "Barbara Liskov", "Ken Thompson")
    return [
        Invoice(
            f"INV-{seed}-{n:06d}",
            Customer(
                f"CUST-{rng.randrange(10**5):05d}",
                rng.choice(names),
                rng.randint(18, 80),
                rng.choice(list(Tier)),
            ),
            rng.choice(list(Currency)),
            f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            tuple(
                LineItem(
                    f"SKU-{rng.randrange(10**4)}",
                    "Seat license",
                    rng.randint(1, 9),
                    round(rng.uniform(1, 500), 2),
                )
                for _ in range(3)
            ),
            f"Payment within {rng.randint(7, 60)} days.",
        )
        for n in range(count)
    ]


# --- the measured functions: one body each, wrapped three ways -----------------------------------


def _extract(invoice: Invoice) -> dict[str, Any]:
    total = sum(item.quantity * item.unit_price for item in invoice.line_items)
    return {
        "invoice_id": invoice.invoice_id,
        "customer": invoice.customer.name,
        "currency": invoice.currency.value,
        "total": round(total, 2),
        "approved": total < 2_000,
    }


def _normalize(amount: float) -> float:
    return round(amount * 1.08, 2)


INVOICES: list[Invoice] = []
AMOUNTS: list[float] = []

extract_invoice = baml_function(name="bench.ExtractInvoice", llm=True)(_extract)
normalize_amount = baml_function(name="bench.normalize_amount")(_normalize)


@baml_function(name="bench.CapturedBatch")
def captured_batch(start: int, stop: int) -> None:
    for index in range(start, stop):
        extract_invoice(INVOICES[index])


@baml_function(name="bench.PlainBatch")
def plain_batch(start: int, stop: int) -> None:
    for index in range(start, stop):
        normalize_amount(AMOUNTS[index])


def _json_default(obj: object) -> object:
    if isinstance(obj, enum.Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return str(obj)


def otel_functions(tracer: Tracer) -> tuple[Callable[[int, int], None], Callable[[int, int], None]]:
    """The same batches, traced: one span per call (and per batch), attributes as documented."""

    def extract(invoice: Invoice) -> dict[str, Any]:
        with tracer.start_as_current_span("bench.ExtractInvoice") as span:
            span.set_attribute("baml.args", json.dumps({"invoice": invoice}, default=_json_default))
            result = _extract(invoice)
            span.set_attribute("baml.output", json.dumps(result, default=_json_default))
            return result

    def normalize(amount: float) -> float:
        with tracer.start_as_current_span("bench.normalize_amount") as span:
            span.set_attribute("code.function", "bench.normalize_amount")
            return _normalize(amount)

    def batch(name: str, body: Callable[[int], object]) -> Callable[[int, int], None]:
        def run(start: int, stop: int) -> None:
            with tracer.start_as_current_span(name) as span:
                span.set_attribute("baml.args", json.dumps({"start": start, "stop": stop}))
                for index in range(start, stop):
                    body(index)

        return run

    return (
        batch("bench.CapturedBatch", lambda i: extract(INVOICES[i])),
        batch("bench.PlainBatch", lambda i: normalize(AMOUNTS[i])),
    )


# --- one measurement ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    app_ns: int
    """Wall time of the calls on the calling thread."""
    thread_cpu_ns: int
    """CPU time of the calling thread during the calls."""
    total_ns: int
    """Wall time of the calls plus the final flush (everything published or exported)."""
    process_cpu_ns: int
    """CPU time of every thread of the process during the calls and the flush."""


@dataclass(frozen=True, slots=True)
class Drive:
    wall_ns: int
    thread_cpu_ns: int
    process_started_ns: int


def _drive(batch: Callable[[int, int], None], calls: int, size: int) -> Drive:
    gc.collect()
    process_started = time.process_time_ns()
    cpu_started = time.thread_time_ns()
    started = time.perf_counter_ns()
    for start in range(0, calls, size):
        batch(start, min(calls, start + size))
    wall = time.perf_counter_ns() - started
    return Drive(wall, time.thread_time_ns() - cpu_started, process_started)


def _sample(drive: Drive, flush_ns: int) -> Sample:
    return Sample(
        drive.wall_ns,
        drive.thread_cpu_ns,
        drive.wall_ns + flush_ns,
        time.process_time_ns() - drive.process_started_ns,
    )


def run_unprofiled(batch: Callable[[int, int], None], calls: int, size: int) -> Sample:
    return _sample(_drive(batch, calls, size), 0)


def run_profiled(
    batch: Callable[[int, int], None], calls: int, size: int, captured: bool
) -> Sample:
    with tempfile.TemporaryDirectory(prefix="baml-bench-", dir=STORE_PARENT) as tmp:
        config = ProfilerConfig(store_root=Path(tmp) / ".baml" / "profiles-v1")
        profiler = Profiler(config).activate()
        try:
            drive = _drive(batch, calls, size)
            started = time.perf_counter_ns()
            if not profiler.flush(timeout=300):
                raise SystemExit("profiler flush timed out")
            sample = _sample(drive, time.perf_counter_ns() - started)
        finally:
            profiler.close()
        stats = profiler.stats
        losses = stats.internal_errors + stats.events_dropped + stats.cas_lost
        expected_cas = 2 * calls if captured else 0
        if losses or stats.data_segments_lost or stats.cas_published < expected_cas:
            raise SystemExit(f"profiler lost data during the benchmark: {stats}")
    return sample


def run_otel(case: str, calls: int, size: int) -> Sample:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=2 * calls + 1024, max_export_batch_size=512)
    )
    captured, plain = otel_functions(provider.get_tracer("bench"))
    drive = _drive(captured if case == "captured" else plain, calls, size)
    started = time.perf_counter_ns()
    provider.force_flush()
    sample = _sample(drive, time.perf_counter_ns() - started)
    spans = len(exporter.get_finished_spans())
    provider.shutdown()
    expected = calls + -(-calls // size)
    if spans != expected:
        raise SystemExit(f"OpenTelemetry exported {spans} spans, expected {expected}")
    return sample


# --- driver ------------------------------------------------------------------------------------


def measure(case: str, calls: int, size: int, reps: int) -> dict[str, list[Sample]]:
    batch = captured_batch if case == "captured" else plain_batch
    results: dict[str, list[Sample]] = {"unprofiled": [], "profiled": [], "otel": []}
    for rep in range(reps):
        INVOICES[:] = make_invoices(calls, seed=rep)
        AMOUNTS[:] = [invoice.line_items[0].unit_price for invoice in INVOICES]
        results["unprofiled"].append(run_unprofiled(batch, calls, size))
        results["profiled"].append(run_profiled(batch, calls, size, case == "captured"))
        INVOICES[:] = make_invoices(calls, seed=1000 + rep)
        AMOUNTS[:] = [invoice.line_items[0].unit_price for invoice in INVOICES]
        results["otel"].append(run_otel(case, calls, size))
    return results


METRICS = ("app_ns", "thread_cpu_ns", "total_ns", "process_cpu_ns")
METRIC_LABELS = ("app wall", "app CPU", "wall+flush", "all CPU")


def per_call_us(samples: list[Sample], calls: int, metric: str) -> float:
    return statistics.median(getattr(s, metric) for s in samples) / calls / 1000


def serialisation_costs_us(count: int = 2_000) -> tuple[float, float]:
    """Per-invoice cost of encode_python (what capture does) and of the span's json.dumps."""
    invoices = make_invoices(count, seed=99)
    costs = []
    for serialise in (
        lambda invoice: encode_python({"invoice": invoice}),
        lambda invoice: json.dumps({"invoice": invoice}, default=_json_default),
    ):
        started = time.perf_counter_ns()
        for invoice in invoices:
            serialise(invoice)
        costs.append((time.perf_counter_ns() - started) / count / 1000)
    return costs[0], costs[1]


def _ratios(values: tuple[float, ...], base: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(v / b for v, b in zip(values, base, strict=True))


def _ratio_row(case: str, label: str, values: tuple[float, ...]) -> None:
    print(f"{case:<9} {label:<40}" + "".join(f"{v:>12.2f}" for v in values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions per mode (median)")
    parser.add_argument("--captured-calls", type=int, default=1_000)
    parser.add_argument("--plain-calls", type=int, default=50_000)
    parser.add_argument("--captured-batch", type=int, default=100, help="captured calls per root")
    parser.add_argument("--plain-batch", type=int, default=1_000, help="plain calls per root")
    parser.add_argument(
        "--store-parent",
        default=None,
        help="directory for the temp store, e.g. /dev/shm to take the disk out of the figures",
    )
    args = parser.parse_args(argv)
    global STORE_PARENT
    STORE_PARENT = args.store_parent
    print(f"Python {sys.version.split()[0]}, {args.reps} repetitions, median µs per call")
    print(f"store under: {STORE_PARENT or tempfile.gettempdir()}")
    print("app wall/CPU: the calling thread during the calls; wall+flush: until everything is")
    print("published/exported; all CPU: every thread of the process, calls and flush")
    header = f"{'case':<9} {'mode':<20}" + "".join(f"{label:>12}" for label in METRIC_LABELS)
    print(header)
    print("-" * len(header))
    summary = []
    cases = (
        ("captured", args.captured_calls, args.captured_batch),
        ("plain", args.plain_calls, args.plain_batch),
    )
    labels = {"unprofiled": "unprofiled", "profiled": "profiled", "otel": "OpenTelemetry span"}
    for case, calls, batch in cases:
        results = measure(case, calls, batch, args.reps)
        rows = {
            mode: tuple(per_call_us(samples, calls, metric) for metric in METRICS)
            for mode, samples in results.items()
        }
        for mode, values in rows.items():
            print(f"{case:<9} {labels[mode]:<20}" + "".join(f"{v:>12.2f}" for v in values))
        summary.append((case, rows["unprofiled"], rows["profiled"], rows["otel"]))
    print()
    print(f"{'case':<9} {'ratio':<40}" + "".join(f"{label:>12}" for label in METRIC_LABELS))
    for case, base, prof, otel in summary:
        added = tuple((p - b) / (o - b) for p, b, o in zip(prof, base, otel, strict=True))
        _ratio_row(
            case, "profiled / unprofiled", tuple(p / b for p, b in zip(prof, base, strict=True))
        )
        _ratio_row(
            case, "OTel span / unprofiled", tuple(o / b for o, b in zip(otel, base, strict=True))
        )
        _ratio_row(case, "profiler overhead / OTel span overhead", added)
        if case == "captured":
            verdict = ", ".join(
                f"{label} {'met' if value <= GOAL else 'NOT met'}"
                for label, value in zip(METRIC_LABELS, added, strict=True)
            )
            print(f"{'':<9} goal: captured call <= 1/3 of a span: {verdict}")
    encode, dumps = serialisation_costs_us()
    print()
    print(f"one invoice argument: encode_python {encode:.2f} µs, json.dumps {dumps:.2f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
