"""Value handles: what the virtual value columns (``args``, ``output``, ``error``,
``errors.value``) hold in a folded table (reference facts §4.5).

* available: ``0x01 ‖ codec u16 BE ‖ cid[32]`` (35 bytes);
* unavailable: ``0x00 ‖ reason`` — a ``ValueLossReason`` tag 0–10, or ``0xFE`` when the role was
  selected but no value fact arrived (``not_captured``);
* NULL: the role does not apply to the row.

The query engine hydrates an available handle from the CAS; an unavailable one is excluded from
predicates and counted by its SQL-facing reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from baml_studio.format.records import ValueAvailable, ValueLossReason, ValueLost, ValueState

LOSS_NOT_CAPTURED = 0xFE
LOSS_PENDING = 0xFD
"""Not a loss: the coordinator's handle for a value whose private row is not yet in the bound
Lance version (``private_state = pending``); counted as the ``pending`` reason."""
AVAILABLE_TAG = 0x01
UNAVAILABLE_TAG = 0x00

LOSS_SQL = {
    ValueLossReason.VALUE_MEMORY_EXCEEDED: "value_memory_exceeded",
    ValueLossReason.VALUE_ATTEMPT_TRANSPORT_EXCEEDED: "value_attempt_transport_exceeded",
    ValueLossReason.ERROR_CAPTURE_ATTEMPT_TRANSPORT_EXCEEDED: (
        "error_capture_attempt_transport_exceeded"
    ),
    ValueLossReason.VALUE_TOO_LARGE: "value_too_large",
    ValueLossReason.COPY_FAILED: "copy_failed",
    ValueLossReason.ENCODE_FAILED: "encode_failed",
    ValueLossReason.CAS_WRITE_FAILED: "cas_write_failed",
    ValueLossReason.CAS_CONFLICT: "cas_conflict",
    ValueLossReason.DISK_GUARD_EXCEEDED: "disk_guard_exceeded",
    ValueLossReason.EVIDENCE_SEGMENT_PUBLISH_FAILED: "evidence_file_publish_failed",
    ValueLossReason.STORE_UNAVAILABLE: "store_unavailable",
}
"""SQL spelling of each loss reason (``relations.rs`` ``loss_str``), used in ``*_state``."""


class InvalidHandle(ValueError):
    """Bytes that are not a value handle (the engine reports them as ``corrupt``)."""


@dataclass(frozen=True, slots=True)
class Available:
    codec: int
    cid: bytes


@dataclass(frozen=True, slots=True)
class Unavailable:
    reason: int
    """A ValueLossReason tag, or LOSS_NOT_CAPTURED."""

    def unavailable_reason(self) -> str:
        """The SQL-facing ``UnavailableReason``: truncated, store_unavailable, not_captured
        or lost."""
        if self.reason == ValueLossReason.VALUE_TOO_LARGE:
            return "truncated"
        if self.reason == ValueLossReason.STORE_UNAVAILABLE:
            return "store_unavailable"
        if self.reason == LOSS_NOT_CAPTURED:
            return "not_captured"
        if self.reason == LOSS_PENDING:
            return "pending"
        return "lost"


Handle = Available | Unavailable


def encode_handle(handle: Handle) -> bytes:
    if isinstance(handle, Available):
        return bytes([AVAILABLE_TAG]) + handle.codec.to_bytes(2, "big") + handle.cid
    return bytes([UNAVAILABLE_TAG, handle.reason])


def decode_handle(raw: bytes) -> Handle:
    if len(raw) == 35 and raw[0] == AVAILABLE_TAG:
        return Available(int.from_bytes(raw[1:3], "big"), bytes(raw[3:]))
    if len(raw) == 2 and raw[0] == UNAVAILABLE_TAG:
        return Unavailable(raw[1])
    raise InvalidHandle(f"not a value handle: {bytes(raw[:8]).hex()}… ({len(raw)} bytes)")


def handle_for(state: ValueState | None) -> bytes:
    """The handle of a value fact; ``None`` (role selected, no fact) is ``not_captured``."""
    if state is None:
        return encode_handle(Unavailable(LOSS_NOT_CAPTURED))
    if isinstance(state, ValueAvailable):
        return encode_handle(Available(state.codec, state.cid))
    assert isinstance(state, ValueLost)
    return encode_handle(Unavailable(int(state.reason)))


def state_text(state: ValueState | None, applicable: bool) -> str:
    """``available`` | ``lost:<reason>`` | ``not_captured`` | ``not_applicable``."""
    if not applicable:
        return "not_applicable"
    if state is None:
        return "not_captured"
    if isinstance(state, ValueAvailable):
        return "available"
    return f"lost:{LOSS_SQL[state.reason]}"


_LOSS_BY_SQL = {f"lost:{text}": reason for reason, text in LOSS_SQL.items()}
VALUE_CID_PREFIX = "bamlv_1_"


def handle_from_public(state: str, cid: str | None) -> bytes | None:
    """The handle the fold gives a codec-1 value, from its public ``<role>_state`` and
    ``<role>_cid`` columns (the inverse of :func:`state_text` and ``value_cid_wire``): NULL
    for ``not_applicable``. ``ValueError`` for a pair the fold never writes. The codec is not
    public: a value of another codec gets the codec-1 handle of its CID, and the reader of its
    body reports it ``unsupported`` (``values_v1`` keeps each body's codec)."""
    if state == "not_applicable":  # the role does not apply (a CID may still be recorded)
        return None
    if state == "available":
        if cid is None or not cid.startswith(VALUE_CID_PREFIX) or len(cid) != 72:
            raise ValueError(f"an available value needs a bamlv_1_ CID, got {cid!r}")
        return encode_handle(Available(1, bytes.fromhex(cid[len(VALUE_CID_PREFIX) :])))
    if cid is not None:
        raise ValueError(f"a value in state {state!r} has no CID, got {cid!r}")
    if state == "not_captured":
        return encode_handle(Unavailable(LOSS_NOT_CAPTURED))
    reason = _LOSS_BY_SQL.get(state)
    if reason is None:
        raise ValueError(f"unknown value state {state!r}")
    return encode_handle(Unavailable(int(reason)))
