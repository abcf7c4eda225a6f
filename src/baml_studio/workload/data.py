"""Seeded, deterministic inputs for the synthetic workload, and what each execution must do.

Execution ``ordinal`` of a workload with seed ``seed`` is a pure function of ``(seed, ordinal)``:
neither the number of executions nor the number of processes changes it. Its *variant* (the
path it takes through the program) is drawn from a shuffled deck of :data:`DECK_SIZE` cards per
block of ordinals, so every full block has exactly the same mix: 3 failed executions (6%), 1
cancelled (2%), 2 errors caught by their root, 1 cancelled spawned call, and 3 executions that
capture values over 32 KiB. Everything else (ids, names, amounts, texts, and a retried
ScoreCustomer rate limit in about 15% of successful invoices) comes from a :class:`random.Random`
seeded with a string, which is stable across processes and platforms.

:func:`expect` states the outcome the program must produce for a job: the root's status, the
escaping error's type and message, and how many calls each BAML function receives. It mirrors
``program.py``; the runner checks it against every real execution.
"""

from __future__ import annotations

import enum
import functools
import random
from collections import Counter
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from baml_studio.workload import program as p

DECK_SIZE = 50
LARGE_VALUE_BYTES = 32 * 1024
"""Captured values above this size are "large"; long documents are generated above it."""

Scalar: TypeAlias = str | int | float | bool


class Variant(enum.Enum):
    INVOICE_OK = "invoice_ok"
    INVOICE_UNREADABLE_REVIEWED = "invoice_unreadable_reviewed"
    INVOICE_UNREADABLE_FAILED = "invoice_unreadable_failed"
    INVOICE_BAD_LINE_ITEM = "invoice_bad_line_item"
    TICKET_OK = "ticket_ok"
    TICKET_UNSUPPORTED_LANGUAGE = "ticket_unsupported_language"
    TICKET_PROVIDER_OUTAGE = "ticket_provider_outage"
    TICKET_STALLED = "ticket_stalled"
    DIGEST_OK = "digest_ok"
    DIGEST_LONG_DOCUMENT = "digest_long_document"
    DIGEST_STALLED_SUMMARY = "digest_stalled_summary"


_DECK_COUNTS = {
    Variant.INVOICE_OK: 19,
    Variant.INVOICE_UNREADABLE_REVIEWED: 1,
    Variant.INVOICE_UNREADABLE_FAILED: 1,
    Variant.INVOICE_BAD_LINE_ITEM: 1,
    Variant.TICKET_OK: 17,
    Variant.TICKET_UNSUPPORTED_LANGUAGE: 1,
    Variant.TICKET_PROVIDER_OUTAGE: 1,
    Variant.TICKET_STALLED: 1,
    Variant.DIGEST_OK: 4,
    Variant.DIGEST_LONG_DOCUMENT: 3,
    Variant.DIGEST_STALLED_SUMMARY: 1,
}
_PRODUCTS = ("GPU hours", "Object storage", "Support plan", "Seat license", "Data egress",
             "Consulting day", "Training session", "API credits")  # fmt: skip
_WORDS = ("latency", "throughput", "customer", "invoice", "pipeline", "release", "outage",
          "budget", "forecast", "migration", "incident", "renewal", "onboarding", "metric",
          "quarter", "model", "prompt", "regression", "capacity", "the", "and", "of", "to",
          "with", "for", "after", "before", "during", "improved", "delayed")  # fmt: skip
_TICKET_SUBJECTS = ("Refund for duplicate charge", "Invoice total looks wrong",
                    "App crash on upload", "Error 500 when exporting", "Cannot login after reset",
                    "Need access for a new teammate", "Feature idea: dark mode",
                    "Billing address change")  # fmt: skip


@dataclass(frozen=True, slots=True)
class InvoiceJob:
    request_id: str
    invoice: p.Invoice
    customer: p.Customer
    document: str
    legible: bool
    allow_manual_review: bool
    audit: bool
    faults: tuple[tuple[str, str, p.Fault], ...]
    root: str = "ProcessInvoice"


@dataclass(frozen=True, slots=True)
class TicketJob:
    request_id: str
    ticket: p.Ticket
    customer: p.Customer
    faults: tuple[tuple[str, str, p.Fault], ...]
    root: str = "TriageTicket"


@dataclass(frozen=True, slots=True)
class DigestJob:
    request_id: str
    day: str
    documents: tuple[p.SourceDocument, ...]
    faults: tuple[tuple[str, str, p.Fault], ...]
    root: str = "DailyDigest"


Job: TypeAlias = InvoiceJob | TicketJob | DigestJob


@dataclass(frozen=True, slots=True)
class Expectation:
    status: str
    """``succeeded``, ``failed`` or ``cancelled`` (the RootEnded status)."""
    error_type: str | None
    """``module.qualname`` of the error escaping the root, when failed."""
    error_message: str | None
    calls: Mapping[str, int]
    """Calls started per function fqn (the CCT's ``invocations_started``)."""


@functools.lru_cache(maxsize=64)
def _deck(seed: int, block: int) -> tuple[Variant, ...]:
    cards = [variant for variant, count in _DECK_COUNTS.items() for _ in range(count)]
    random.Random(f"baml-workload-deck:{seed}:{block}").shuffle(cards)
    return tuple(cards)


def variant_for(seed: int, ordinal: int) -> Variant:
    return _deck(seed, ordinal // DECK_SIZE)[ordinal % DECK_SIZE]


def make_job(seed: int, ordinal: int) -> tuple[Variant, Job]:
    """The job for execution ``ordinal`` (a pure function of ``seed`` and ``ordinal``)."""
    variant = variant_for(seed, ordinal)
    rng = random.Random(f"baml-workload-job:{seed}:{ordinal}")
    request_id = f"req-{ordinal:06d}"
    if variant.name.startswith("INVOICE"):
        return variant, _invoice_job(rng, variant, request_id, ordinal)
    if variant.name.startswith("TICKET"):
        return variant, _ticket_job(rng, variant, request_id, ordinal)
    return variant, _digest_job(rng, variant, request_id)


def _customer(rng: random.Random) -> p.Customer:
    return p.customer_record(f"CUST-{rng.randrange(1, 400):05d}")


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(_WORDS, k=words)).capitalize() + "."


def _invoice_job(rng: random.Random, variant: Variant, request_id: str, ordinal: int) -> Job:
    customer = _customer(rng)
    currency = rng.choice(list(p.Currency))
    scale = 100.0 if currency is p.Currency.JPY else 1.0
    items = [
        p.LineItem(
            f"SKU-{rng.randrange(1000, 9999)}",
            rng.choice(_PRODUCTS),
            rng.randint(1, 12),
            round(rng.uniform(2.0, 900.0) * scale, 2),
        )
        for _ in range(rng.randint(1, 6))
    ]
    if variant is Variant.INVOICE_BAD_LINE_ITEM:
        bad = rng.randrange(len(items))
        items[bad] = p.LineItem(items[bad].sku, items[bad].description, -rng.randint(1, 3), 9.99)
    invoice = p.Invoice(
        f"INV-{1000 + ordinal}", customer.customer_id,
        f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", currency, tuple(items),
        _sentence(rng, rng.randint(12, 40)),
    )  # fmt: skip
    faults: tuple[tuple[str, str, p.Fault], ...] = ()
    if variant is Variant.INVOICE_OK and rng.random() < 0.15:
        faults = (("ScoreCustomer", customer.customer_id, p.Fault.RATE_LIMIT),)
    legible = variant not in (
        Variant.INVOICE_UNREADABLE_REVIEWED, Variant.INVOICE_UNREADABLE_FAILED
    )  # fmt: skip
    return InvoiceJob(
        request_id, invoice, customer, p.render_invoice_document(invoice, legible=legible),
        legible, allow_manual_review=variant is not Variant.INVOICE_UNREADABLE_FAILED,
        audit=rng.random() < 0.3, faults=faults,
    )  # fmt: skip


def _ticket_job(rng: random.Random, variant: Variant, request_id: str, ordinal: int) -> Job:
    customer = _customer(rng)
    ticket_id = f"TCK-{5000 + ordinal}"
    priority = rng.choices(list(p.Priority), weights=(3, 5, 2, 1))[0]
    if variant is Variant.TICKET_PROVIDER_OUTAGE:
        priority = rng.choice((p.Priority.LOW, p.Priority.NORMAL))
    language = rng.choices(p.SUPPORTED_LANGUAGES, weights=(8, 1, 1, 1))[0]
    if variant is Variant.TICKET_UNSUPPORTED_LANGUAGE:
        language = rng.choice(("fi", "hu", "is"))
    contact = rng.choice(
        (customer.email, f"+1 555 {rng.randrange(1000, 9999)} {ordinal % 100:02d}")
    )
    body = f"{_sentence(rng, rng.randint(15, 60))} Reach me at {contact}. {_sentence(rng, 10)}"
    ticket = p.Ticket(
        ticket_id, customer.customer_id, rng.choice(_TICKET_SUBJECTS), body, priority, language
    )
    faults: tuple[tuple[str, str, p.Fault], ...] = ()
    if variant is Variant.TICKET_PROVIDER_OUTAGE:
        faults = (("DraftReply", ticket_id, p.Fault.OUTAGE),)
    elif variant is Variant.TICKET_STALLED:
        faults = (("ClassifyTicket", ticket_id, p.Fault.STALL),)
    return TicketJob(request_id, ticket, customer, faults)


def _document(rng: random.Random, title: str, approx_bytes: int) -> p.SourceDocument:
    paragraphs = [f"# {title}"]
    size = len(title) + 2
    while size < approx_bytes:
        paragraph = " ".join(_sentence(rng, rng.randint(8, 24)) for _ in range(6))
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    return p.SourceDocument(title, "\n\n".join(paragraphs))


def _digest_job(rng: random.Random, variant: Variant, request_id: str) -> Job:
    count = rng.randint(3, 5)
    long_index = rng.randrange(count) if variant is Variant.DIGEST_LONG_DOCUMENT else -1
    documents = tuple(
        _document(
            rng,
            f"Report {n + 1}: {rng.choice(_WORDS)} {rng.choice(_WORDS)}",
            rng.randint(40_000, 72_000) if n == long_index else rng.randint(600, 4_000),
        )
        for n in range(count)
    )
    faults: tuple[tuple[str, str, p.Fault], ...] = ()
    if variant is Variant.DIGEST_STALLED_SUMMARY:
        stalled = rng.choice(documents)
        faults = (("Summarize", p.text_subject(stalled.text), p.Fault.STALL),)
    day = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return DigestJob(request_id, day, documents, faults)


def provider_for(job: Job) -> p.SimulatedProvider:
    return p.SimulatedProvider({(fn, subject): fault for fn, subject, fault in job.faults})


def start_root(job: Job) -> Coroutine[Any, Any, object]:
    """The root call of ``job``, as a coroutine to run in its own task."""
    if isinstance(job, InvoiceJob):
        return p.process_invoice(
            job.request_id, job.customer.customer_id, job.document, job.allow_manual_review,
            job.audit,
        )  # fmt: skip
    if isinstance(job, TicketJob):
        return p.triage_ticket(job.request_id, job.ticket)
    return p.daily_digest(job.request_id, job.day, list(job.documents))


def expect(job: Job) -> Expectation:
    """The outcome ``program.py`` must produce for ``job``."""
    calls: Counter[str] = Counter({job.root: 1})
    if isinstance(job, InvoiceJob):
        return _expect_invoice(job, calls)
    if isinstance(job, TicketJob):
        return _expect_ticket(job, calls)
    calls["Summarize"] += len(job.documents)
    calls["render_digest"] += 1
    return _done(calls)


def _done(calls: Counter[str], error: BaseException | None = None) -> Expectation:
    if error is None:
        return Expectation("succeeded", None, None, dict(calls))
    return Expectation("failed", p.qualified_name(type(error)), str(error), dict(calls))


def _expect_invoice(job: InvoiceJob, calls: Counter[str]) -> Expectation:
    calls.update(("lookup_customer", "ExtractInvoice"))
    invoice = job.invoice
    if not job.legible:
        if not job.allow_manual_review:
            return _done(calls, p.ExtractionError(invoice.invoice_id, p.UNREADABLE))
        calls["queue_manual_review"] += 1
        return _done(calls)
    for index, item in enumerate(invoice.line_items):
        calls["validate_line_item"] += 1
        if item.quantity <= 0:
            error = p.LineItemValidationError(invoice.invoice_id, index, item.sku, item.quantity)
            return _done(calls, error)
        calls["normalize_amount"] += 1
    rate_limited = any(fault is p.Fault.RATE_LIMIT for _, _, fault in job.faults)
    calls["ScoreCustomer"] += 2 if rate_limited else 1
    calls.update(("Summarize", "assess_risk"))
    return _done(calls)


def _expect_ticket(job: TicketJob, calls: Counter[str]) -> Expectation:
    calls.update(("lookup_customer", "redact_pii", "ClassifyTicket"))
    ticket = job.ticket
    if ticket.language not in p.SUPPORTED_LANGUAGES:
        calls["route_to_human"] += 1
        return _done(calls)
    faults = {fault for _, _, fault in job.faults}
    if p.Fault.STALL in faults:
        return Expectation("cancelled", None, None, dict(calls))
    calls["DraftReply"] += 1
    if p.Fault.OUTAGE in faults:
        return _done(calls, p.ProviderUnavailableError("DraftReply", ticket.ticket_id, 503))
    if ticket.priority in (p.Priority.HIGH, p.Priority.URGENT):
        calls["Summarize"] += 1
    return _done(calls)


def arguments(job: Job) -> dict[str, Scalar]:
    """A few argument values of ``job``, for checking query results against the report."""
    if isinstance(job, DigestJob):
        sizes = [len(doc.text.encode()) for doc in job.documents]
        return {"request_id": job.request_id, "day": job.day, "documents": len(sizes),
                "largest_document_bytes": max(sizes)}  # fmt: skip
    customer = job.customer
    common: dict[str, Scalar] = {
        "request_id": job.request_id, "customer_id": customer.customer_id,
        "customer_name": customer.name, "customer_age": customer.age,
        "customer_tier": customer.tier.value,
    }  # fmt: skip
    if isinstance(job, InvoiceJob):
        invoice = job.invoice
        return {"invoice_id": invoice.invoice_id, **common, "currency": invoice.currency.value,
                "line_items": len(invoice.line_items), "audit": job.audit}  # fmt: skip
    ticket = job.ticket
    return {"ticket_id": ticket.ticket_id, **common, "priority": ticket.priority.value,
            "language": ticket.language}  # fmt: skip


def large_values(job: Job) -> int:
    """How many captured values of ``job`` exceed :data:`LARGE_VALUE_BYTES` (at least)."""
    if not isinstance(job, DigestJob):
        return 0
    long_docs = sum(len(doc.text.encode()) > LARGE_VALUE_BYTES for doc in job.documents)
    # Each long document is one Summarize input; the root's input holds all of them.
    return long_docs + (1 if long_docs else 0)
