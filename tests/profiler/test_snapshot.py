"""Captured values are what they were at capture time, however they are frozen."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from readback import load

from baml_studio.format.records import RootStatus, ValueOccurrence, ValueRole
from baml_studio.format.values import decode_value, encode_python, to_json
from baml_studio.profiler import Profiler, baml_function
from baml_studio.profiler.snapshot import (
    ENCODED,
    HELD,
    MARSHALLED,
    encode,
    exception_value,
    is_deeply_immutable,
    take,
    take_args,
)


class Tier(enum.Enum):
    GOLD = "gold"


@dataclass(frozen=True)
class FrozenCustomer:
    name: str
    tier: Tier
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class FrozenWithList:
    items: list[int]


@dataclass
class Mutable:
    items: list[int] = field(default_factory=list)


class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    age: int


class MutableModel(BaseModel):
    name: str


def test_immutability_check() -> None:
    assert is_deeply_immutable(FrozenCustomer("a", Tier.GOLD, ("x",)))
    assert is_deeply_immutable(FrozenModel(name="a", age=3))
    assert is_deeply_immutable((1, "a", frozenset({2}), None, b"x", 1.5, Tier.GOLD))
    assert not is_deeply_immutable(FrozenWithList([1]))
    assert not is_deeply_immutable(Mutable())
    assert not is_deeply_immutable(MutableModel(name="a"))
    assert not is_deeply_immutable((1, [2]))


def test_each_freezing_way_encodes_the_same_bytes() -> None:
    values = [
        {"a": [1, 2.5, None, "x"]},
        FrozenCustomer("a", Tier.GOLD, ("x",)),
        Mutable([1, 2]),
        FrozenModel(name="b", age=4),
    ]
    kinds = [take(v)[0] for v in values]
    assert kinds == [MARSHALLED, HELD, ENCODED, HELD]
    for value in values:
        assert encode(take(value)) == encode_python(value)
    args = {"customer": FrozenCustomer("a", Tier.GOLD)}
    assert take_args(args)[0] == HELD
    assert encode(take_args(args)) == encode_python(args)


@baml_function(name="snapshot.Keep", llm=True)
def keep(box: Mutable) -> Mutable:
    box.items.append(99)  # mutated during the call: the input was captured before
    return box


def test_mutation_after_capture_does_not_change_the_record(
    profiler: Profiler, store_root: Path
) -> None:
    box = Mutable([1])
    keep(box)
    box.items.append(100)  # mutated after the call: the output was captured at return
    assert profiler.flush()
    view = load(store_root)
    values = {v.role: view.value(v.value) for v in view.only().of(ValueOccurrence)}
    assert values[ValueRole.INPUT] == {"box": {"items": [1]}}
    assert values[ValueRole.OUTPUT] == {"items": [1, 99]}


def test_buffer_objects_follow_the_encoders_rules_not_their_raw_memory() -> None:
    """marshal takes any object with the buffer protocol and writes its memory as bytes: an
    ``np.int64(7)`` argument was recorded as ``{"$bytes": "0700000000000000"}``."""
    import array

    np = pytest.importorskip("numpy")
    values = [array.array("i", [1, 2]), memoryview(b"ab"), np.int64(7), np.float32(1.5),
              np.arange(3, dtype=np.int32), bytearray(b"xy")]  # fmt: skip
    for value in values:
        assert encode(take(value)) == encode_python(value), value
        args = {"x": value, "label": "a"}
        assert encode(take_args(args)) == encode_python(args), value
    assert to_json(decode_value(encode(take(np.int64(7))))) == 7


class Hostile:
    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"no {name}")


def test_a_hostile_argument_is_omitted_alone() -> None:
    """Its ``__class__`` raised inside the immutability check, and the whole argument map was
    lost (``lost:encode_failed``), its siblings with it."""
    args = {"evil": Hostile(), "label": "kept"}
    assert not is_deeply_immutable(args["evil"])
    recorded = to_json(decode_value(encode(take_args(args))))
    assert recorded["label"] == "kept" and "evil" in recorded


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class HttpError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(f"HTTP failure: {message}")
        self.message = message
        self.type = "transient"
        self.status = 503


def test_an_exceptions_value_keeps_its_real_type_and_message() -> None:
    value = exception_value(HttpError("timeout"))
    assert value["type"].endswith("HttpError") and value["message"] == "HTTP failure: timeout"
    assert value["message_attribute"] == "timeout" and value["type_attribute"] == "transient"
    assert value["status"] == 503
    unprintable = exception_value(Unprintable("x"))
    assert unprintable["message"] == "<str() of Unprintable raised RuntimeError>"


@baml_function(name="snapshot.Unprintable")
def raises_unprintable() -> None:
    raise Unprintable("x")


@baml_function(name="snapshot.After")
def after(n: int) -> int:
    return n


def test_an_exception_whose_str_raises_leaves_later_roots_their_own(
    profiler: Profiler, store_root: Path
) -> None:
    """``str(exc)`` raised inside the error's record, the frame was never ended, and every
    later root of the thread was recorded as a child of the dead call."""
    for _ in range(2):
        with pytest.raises(Unprintable):
            raises_unprintable()
    assert [after(1), after(2)] == [1, 2]
    assert profiler.flush()
    view = load(store_root)
    assert len(view.executions) == 4
    statuses = sorted(str(ex.ended.status) for ex in view.executions.values() if ex.ended)
    assert statuses == sorted([str(RootStatus.FAILED)] * 2 + [str(RootStatus.SUCCEEDED)] * 2)
    assert profiler.stats.internal_errors == 0


class Big:
    alive = 0

    def __init__(self) -> None:
        Big.alive += 1

    def __del__(self) -> None:
        Big.alive -= 1


@baml_function(name="snapshot.Fails")
def fails() -> None:
    big = Big()  # a local of the frame the traceback keeps
    raise ValueError(big)


@baml_function(name="snapshot.Retries")
def retries(times: int) -> int:
    """How many ``Big`` objects are alive once ``times`` failures were caught (in the root)."""
    import gc

    for _ in range(times):
        try:
            fails()
        except ValueError:  # caught, as an application retrying a call does
            continue
    gc.collect()
    return Big.alive


def test_caught_exceptions_are_not_all_kept_until_the_root_ends(
    profiler: Profiler, store_root: Path
) -> None:
    """Every caught exception (with its frames and locals) was held until the root ended: a
    root that retried 200 times kept 200 of them."""
    from baml_studio.profiler.runtime import MAX_LIVE_THROWS

    assert retries(200) <= MAX_LIVE_THROWS  # 200 before
    assert profiler.flush()
    (ex,) = load(store_root).executions.values()
    assert ex.ended is not None and ex.ended.status == RootStatus.SUCCEEDED
