"""A BAML-like program for the synthetic workload: types, LLM functions, helpers and roots.

The functions mirror what a BAML project runs: LLM functions (``llm=True``), whose inputs,
outputs and errors the profiler captures; ordinary helpers, which only feed the calling-context
tree unless a caller wraps them in :func:`~baml_studio.profiler.capture`; and three root
orchestrators (``ProcessInvoice``, ``TriageTicket``, ``DailyDigest``). Every function
is deterministic in its arguments. LLM latency is simulated by yielding to the event loop
(``asyncio.sleep(0)``), never by sleeping. Provider faults (rate limits, outages, stalls) come
from the :class:`SimulatedProvider` in :data:`PROVIDER`, which the runner sets per execution.

Errors the program raises (application errors, deliberately outside ``BamlStudioError``)::

    WorkloadProgramError
    ├── ExtractionError              ExtractInvoice could not read a document (.invoice_id)
    ├── LineItemValidationError      validate_line_item rejected an item (.invoice_id, .sku)
    ├── UnsupportedLanguageError     ClassifyTicket got an unsupported language (.ticket_id)
    └── ProviderError                the simulated LLM provider failed (.function, .subject)
        ├── ProviderRateLimitError   retry later (.retry_after_ms); ScoreCustomer retries once
        └── ProviderUnavailableError the request failed (.status)
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import enum
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from baml_studio.profiler import baml_function, capture

# --- types -----------------------------------------------------------------------------------


class Currency(enum.Enum):
    USD = "USD"
    EUR = "EUR"
    GBP = "GBP"
    JPY = "JPY"


USD_PER_UNIT = {Currency.USD: 1.0, Currency.EUR: 1.08, Currency.GBP: 1.27, Currency.JPY: 0.0067}


class CustomerTier(enum.Enum):
    FREE = "free"
    PRO = "pro"
    ENTERPRISE = "enterprise"


class Priority(enum.Enum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    URGENT = "urgent"


class TicketCategory(enum.Enum):
    BILLING = "billing"
    BUG = "bug"
    ACCOUNT = "account"
    FEATURE_REQUEST = "feature_request"


class ReviewState(enum.Enum):
    APPROVED = "approved"
    NEEDS_REVIEW = "needs_review"


class Customer(BaseModel):
    """A CRM record (a pydantic model, as BAML's Python client generates)."""

    model_config = ConfigDict(frozen=True)

    customer_id: str
    name: str
    age: int
    tier: CustomerTier
    email: str


@dataclass(frozen=True, slots=True)
class LineItem:
    sku: str
    description: str
    quantity: int
    unit_price: float


@dataclass(frozen=True, slots=True)
class Invoice:
    invoice_id: str
    customer_id: str
    issued_on: str
    currency: Currency
    line_items: tuple[LineItem, ...]
    notes: str


@dataclass(frozen=True, slots=True)
class CustomerScore:
    customer_id: str
    score: float
    band: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class InvoiceOutcome:
    request_id: str
    invoice_id: str
    state: ReviewState
    total_usd: float
    risk: float | None
    score: CustomerScore | None
    note: str


@dataclass(frozen=True, slots=True)
class Ticket:
    ticket_id: str
    customer_id: str
    subject: str
    body: str
    priority: Priority
    language: str


@dataclass(frozen=True, slots=True)
class TicketClassification:
    category: TicketCategory
    urgency: Priority
    confidence: float


@dataclass(frozen=True, slots=True)
class TriageOutcome:
    request_id: str
    ticket_id: str
    category: TicketCategory | None
    routed_to_human: bool
    reply: str | None
    summary: str | None


@dataclass(frozen=True, slots=True)
class SourceDocument:
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class Digest:
    day: str
    sections: tuple[tuple[str, str], ...]
    skipped: tuple[str, ...]
    markdown: str


# --- errors ----------------------------------------------------------------------------------


class WorkloadProgramError(Exception):
    """An application error of the synthetic program."""


class ExtractionError(WorkloadProgramError):
    def __init__(self, invoice_id: str, reason: str) -> None:
        super().__init__(f"could not extract invoice {invoice_id}: {reason}")
        self.invoice_id = invoice_id
        self.reason = reason


class LineItemValidationError(WorkloadProgramError):
    def __init__(self, invoice_id: str, index: int, sku: str, quantity: int) -> None:
        super().__init__(
            f"invoice {invoice_id} line item {index} ({sku}): quantity must be positive, "
            f"got {quantity}"
        )
        self.invoice_id = invoice_id
        self.sku = sku
        self.quantity = quantity


class UnsupportedLanguageError(WorkloadProgramError):
    def __init__(self, ticket_id: str, language: str) -> None:
        super().__init__(
            f"ticket {ticket_id} is in {language!r}; supported: {', '.join(SUPPORTED_LANGUAGES)}"
        )
        self.ticket_id = ticket_id
        self.language = language


class ProviderError(WorkloadProgramError):
    def __init__(self, function: str, subject: str, message: str) -> None:
        super().__init__(f"{function} for {subject}: {message}")
        self.function = function
        self.subject = subject


class ProviderRateLimitError(ProviderError):
    def __init__(self, function: str, subject: str, retry_after_ms: int) -> None:
        super().__init__(function, subject, f"rate limited, retry after {retry_after_ms} ms")
        self.retry_after_ms = retry_after_ms


class ProviderUnavailableError(ProviderError):
    def __init__(self, function: str, subject: str, status: int) -> None:
        super().__init__(function, subject, f"provider returned HTTP {status}")
        self.status = status


def qualified_name(cls: type) -> str:
    """``module.qualname``, as the profiler records an exception's type."""
    return f"{cls.__module__}.{cls.__qualname__}"


# --- the simulated LLM provider ----------------------------------------------------------------


class Fault(enum.Enum):
    RATE_LIMIT = "rate_limit"
    """The first attempt fails with ProviderRateLimitError; later attempts succeed."""
    OUTAGE = "outage"
    """Every attempt fails with ProviderUnavailableError (HTTP 503)."""
    STALL = "stall"
    """The call never completes; only cancellation ends it (see ``SimulatedProvider.settle``)."""


class SimulatedProvider:
    """The LLM provider of one execution: simulated latency plus scripted faults.

    ``faults`` maps ``(function fqn, subject)`` to a :class:`Fault`; the subject is what the
    function is about (a customer id, a ticket id, a text's first line).
    """

    def __init__(self, faults: Mapping[tuple[str, str], Fault] | None = None) -> None:
        self._faults = dict(faults or {})
        self._attempts: dict[tuple[str, str], int] = {}
        self._stalled: set[asyncio.Task[Any]] = set()
        self._waiters: list[asyncio.Future[None]] = []

    async def complete(self, function: str, subject: str, steps: int) -> None:
        """One provider round trip: ``steps`` event-loop yields, then the scripted fault."""
        key = (function, subject)
        attempt = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempt
        for _ in range(steps):
            await asyncio.sleep(0)
        fault = self._faults.get(key)
        if fault is Fault.RATE_LIMIT and attempt == 1:
            raise ProviderRateLimitError(function, subject, retry_after_ms=250)
        if fault is Fault.OUTAGE:
            raise ProviderUnavailableError(function, subject, status=503)
        if fault is Fault.STALL:
            await self._stall()

    async def _stall(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._stalled.add(task)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()
        await asyncio.get_running_loop().create_future()

    async def settle(self, tasks: Sequence[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
        """Wait until each task is done or stalled; cancel the stalled ones and return them.

        This is the simulated deadline: a stalled call never finishes, so the caller gives up on
        it exactly when nothing else it waits for can still make progress.
        """
        while True:
            pending = [task for task in tasks if not task.done()]
            if not pending:
                return []
            stalled = [task for task in pending if task in self._stalled]
            if len(stalled) == len(pending):
                for task in stalled:
                    task.cancel()
                await asyncio.wait(stalled)
                return stalled
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await asyncio.wait([*pending, waiter], return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                waiter.cancel()
                self._waiters.remove(waiter)


PROVIDER: contextvars.ContextVar[SimulatedProvider | None] = contextvars.ContextVar(
    "baml_workload_provider", default=None
)
"""The provider of the current execution; the runner sets a fresh one for each execution."""


def provider() -> SimulatedProvider:
    """The current execution's provider (a fault-free one outside the runner)."""
    return PROVIDER.get() or SimulatedProvider()


def latency_steps(text: str) -> int:
    """Simulated latency in event-loop yields: longer prompts take a little longer."""
    return 1 + min(2, len(text) // 16_384)


def text_subject(text: str) -> str:
    """The subject of a text for provider fault scripts: its first line, at most 80 characters."""
    return text.split("\n", 1)[0][:80]


# --- documents and the CRM ---------------------------------------------------------------------

SUPPORTED_LANGUAGES = ("en", "de", "fr", "es")
UNREADABLE = "line items are unreadable (scan quality too low)"
_FIRST_NAMES = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Ken", "Radia", "Donald", "Frances",
                "John", "Margaret", "Dennis", "Hedy", "Tim", "Katherine", "Niklaus")  # fmt: skip
_LAST_NAMES = ("Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Thompson", "Perlman",
               "Knuth", "Allen", "Backus", "Hamilton", "Ritchie", "Lamarr", "Berners-Lee",
               "Johnson", "Wirth")  # fmt: skip
_PII = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|\+?\d[\d -]{7,}\d")


def customer_record(customer_id: str) -> Customer:
    """The CRM's record for ``customer_id`` (a pure function of the id)."""
    rng = random.Random(f"baml-workload-customer:{customer_id}")
    first, last = rng.choice(_FIRST_NAMES), rng.choice(_LAST_NAMES)
    tier = rng.choices(list(CustomerTier), weights=(5, 3, 2))[0]
    email = f"{first.lower()}.{last.lower()}@example.com"
    return Customer(
        customer_id=customer_id, name=f"{first} {last}", age=rng.randint(19, 78), tier=tier,
        email=email,
    )  # fmt: skip


def render_invoice_document(invoice: Invoice, *, legible: bool = True) -> str:
    """The scanned-invoice text ExtractInvoice reads back; illegible scans lose the items."""
    lines = [
        f"INVOICE {invoice.invoice_id}",
        f"Customer: {invoice.customer_id}",
        f"Issued: {invoice.issued_on}",
        f"Currency: {invoice.currency.value}",
    ]
    if legible:
        lines += [
            f"Item: {i.sku} | {i.description} | {i.quantity} x {i.unit_price:.2f}"
            for i in invoice.line_items
        ]
    else:
        lines.append("Item: #### [scan unreadable] ####")
    lines.append(f"Notes: {invoice.notes}")
    return "\n".join(lines)


def _parse_invoice(document: str) -> Invoice:
    fields: dict[str, str] = {}
    items: list[LineItem] = []
    lines = document.split("\n")
    invoice_id = lines[0].removeprefix("INVOICE ").strip()
    for line in lines[1:]:
        name, _, value = line.partition(": ")
        if name != "Item":
            fields[name] = value
            continue
        parts = [part.strip() for part in value.split("|")]
        if len(parts) != 3:
            raise ExtractionError(invoice_id, UNREADABLE)
        quantity, _, price = parts[2].partition(" x ")
        items.append(LineItem(parts[0], parts[1], int(quantity), float(price)))
    return Invoice(
        invoice_id, fields["Customer"], fields["Issued"], Currency(fields["Currency"]),
        tuple(items), fields.get("Notes", ""),
    )  # fmt: skip


# --- LLM functions -----------------------------------------------------------------------------


@baml_function(name="ExtractInvoice", llm=True)
async def extract_invoice(document: str) -> Invoice:
    await provider().complete("ExtractInvoice", text_subject(document), 1)
    return _parse_invoice(document)


@baml_function(name="ScoreCustomer", llm=True)
async def score_customer(customer: Customer, invoice_total_usd: float) -> CustomerScore:
    await provider().complete("ScoreCustomer", customer.customer_id, 1)
    tier_bonus = {CustomerTier.FREE: 0.0, CustomerTier.PRO: 0.15, CustomerTier.ENTERPRISE: 0.3}
    score = round(min(1.0, 0.35 + tier_bonus[customer.tier] + min(customer.age, 60) / 200), 3)
    reasons = [f"tier {customer.tier.value}"]
    if invoice_total_usd > 5_000:
        score = round(score * 0.9, 3)
        reasons.append("large invoice")
    band = "high" if score >= 0.75 else "medium" if score >= 0.5 else "low"
    return CustomerScore(customer.customer_id, score, band, tuple(reasons))


_CATEGORY_WORDS = (
    (TicketCategory.BILLING, ("invoice", "charge", "refund", "billing")),
    (TicketCategory.BUG, ("error", "crash", "broken", "bug")),
    (TicketCategory.ACCOUNT, ("login", "password", "account", "access")),
)


@baml_function(name="ClassifyTicket", llm=True)
async def classify_ticket(ticket: Ticket) -> TicketClassification:
    if ticket.language not in SUPPORTED_LANGUAGES:
        raise UnsupportedLanguageError(ticket.ticket_id, ticket.language)
    await provider().complete("ClassifyTicket", ticket.ticket_id, latency_steps(ticket.body))
    text = f"{ticket.subject} {ticket.body}".lower()
    for category, words in _CATEGORY_WORDS:
        hits = sum(word in text for word in words)
        if hits:
            return TicketClassification(category, ticket.priority, round(0.6 + 0.1 * hits, 2))
    return TicketClassification(TicketCategory.FEATURE_REQUEST, ticket.priority, 0.55)


@baml_function(name="DraftReply", llm=True)
async def draft_reply(
    ticket: Ticket, classification: TicketClassification, customer: Customer
) -> str:
    await provider().complete("DraftReply", ticket.ticket_id, 1)
    first_name = customer.name.split(" ", 1)[0]
    return (
        f'Hi {first_name}, thanks for reaching out about "{ticket.subject}". We filed it as '
        f"{classification.category.value} ({classification.urgency.value}) and will follow up."
    )


@baml_function(name="Summarize", llm=True)
async def summarize(text: str, max_words: int) -> str:
    await provider().complete("Summarize", text_subject(text), latency_steps(text))
    words = text.split(maxsplit=max_words)[:max_words]
    return " ".join(words) + (" …" if len(words) == max_words else "")


# --- ordinary helpers ----------------------------------------------------------------------------


@baml_function(name="lookup_customer")
def lookup_customer(customer_id: str) -> Customer:
    return customer_record(customer_id)


@baml_function(name="validate_line_item")
def validate_line_item(invoice_id: str, index: int, item: LineItem) -> None:
    if item.quantity <= 0:
        raise LineItemValidationError(invoice_id, index, item.sku, item.quantity)


@baml_function(name="normalize_amount")
def normalize_amount(amount: float, currency: Currency) -> float:
    return round(amount * USD_PER_UNIT[currency], 2)


@baml_function(name="assess_risk")
def assess_risk(total_usd: float, customer_score: float) -> float:
    return round(min(1.0, total_usd / 20_000) * (1.0 - customer_score), 4)


@baml_function(name="queue_manual_review")
def queue_manual_review(request_id: str, invoice_id: str, reason: str) -> str:
    return f"review queued for {invoice_id} ({request_id}): {reason}"


@baml_function(name="redact_pii")
def redact_pii(text: str) -> str:
    return _PII.sub("[redacted]", text)


@baml_function(name="route_to_human")
def route_to_human(ticket_id: str, language: str) -> str:
    return f"{ticket_id} routed to the {language} support queue"


@baml_function(name="render_digest")
def render_digest(day: str, sections: Iterable[tuple[str, str]], skipped: Sequence[str]) -> str:
    parts = [f"# Digest for {day}"]
    parts += [f"## {title}\n{summary}" for title, summary in sections]
    if skipped:
        parts.append("Skipped (timed out): " + ", ".join(skipped))
    return "\n\n".join(parts)


async def score_with_retry(customer: Customer, invoice_total_usd: float) -> CustomerScore:
    """Score a customer, retrying once when the provider rate-limits (a plain Python helper)."""
    try:
        return await score_customer(customer, invoice_total_usd)
    except ProviderRateLimitError:
        return await score_customer(customer, invoice_total_usd)


# --- roots -------------------------------------------------------------------------------------


@baml_function(name="ProcessInvoice")
async def process_invoice(
    request_id: str, customer_id: str, document: str, allow_manual_review: bool, audit: bool
) -> InvoiceOutcome:
    customer = lookup_customer(customer_id)
    try:
        invoice = await extract_invoice(document)
    except ExtractionError as exc:
        if not allow_manual_review:
            raise
        note = queue_manual_review(request_id, exc.invoice_id, exc.reason)
        return InvoiceOutcome(
            request_id, exc.invoice_id, ReviewState.NEEDS_REVIEW, 0.0, None, None, note
        )
    total = 0.0
    for index, item in enumerate(invoice.line_items):
        validate_line_item(invoice.invoice_id, index, item)
        total += normalize_amount(item.quantity * item.unit_price, invoice.currency)
    score, note = await asyncio.gather(
        score_with_retry(customer, total), summarize(invoice.notes, 12)
    )
    if audit:
        with capture(inputs=True, output=True):
            risk = assess_risk(total, score.score)
    else:
        risk = assess_risk(total, score.score)
    state = ReviewState.APPROVED if risk < 0.5 else ReviewState.NEEDS_REVIEW
    return InvoiceOutcome(request_id, invoice.invoice_id, state, round(total, 2), risk, score, note)


@baml_function(name="TriageTicket")
async def triage_ticket(request_id: str, ticket: Ticket) -> TriageOutcome:
    customer = lookup_customer(ticket.customer_id)
    with capture(inputs=True, output=True):
        body = redact_pii(ticket.body)
    redacted = dataclasses.replace(ticket, body=body)
    try:
        classification = await classify_ticket(redacted)
    except UnsupportedLanguageError as exc:
        route_to_human(ticket.ticket_id, exc.language)
        return TriageOutcome(request_id, ticket.ticket_id, None, True, None, None)
    summary: str | None = None
    if ticket.priority in (Priority.HIGH, Priority.URGENT):
        reply, summary = await asyncio.gather(
            draft_reply(redacted, classification, customer), summarize(redacted.body, 20)
        )
    else:
        reply = await draft_reply(redacted, classification, customer)
    return TriageOutcome(
        request_id, ticket.ticket_id, classification.category, False, reply, summary
    )


@baml_function(name="DailyDigest")
async def daily_digest(request_id: str, day: str, documents: list[SourceDocument]) -> Digest:
    tasks = [
        asyncio.create_task(summarize(doc.text, 40), name=f"summarize {doc.title}")
        for doc in documents
    ]
    await provider().settle(tasks)
    sections = tuple(
        (doc.title, task.result())
        for doc, task in zip(documents, tasks, strict=True)
        if not task.cancelled()
    )
    skipped = tuple(
        doc.title for doc, task in zip(documents, tasks, strict=True) if task.cancelled()
    )
    markdown = await asyncio.to_thread(render_digest, day, sections, skipped)
    return Digest(day, sections, skipped, markdown)
