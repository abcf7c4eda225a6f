"""Captured values are what they were at capture time, however they are frozen."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from readback import load

from baml_studio.format.records import ValueOccurrence, ValueRole
from baml_studio.format.values import encode_python
from baml_studio.profiler import Profiler, baml_function
from baml_studio.profiler.snapshot import (
    ENCODED,
    HELD,
    MARSHALLED,
    encode,
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
