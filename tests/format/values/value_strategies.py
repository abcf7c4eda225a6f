"""Hypothesis strategies for codec-1 values and for the Python objects the profiler captures."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from hypothesis import strategies as st

from baml_studio.format.values import (
    NULL,
    BigInt,
    Bool,
    Bytes,
    Class,
    Enum,
    Float,
    Int,
    List,
    Map,
    Media,
    MediaKind,
    Omitted,
    String,
    Value,
)
from baml_studio.format.values.model import I64_MAX, I64_MIN, MEDIA_SOURCES
from baml_studio.format.values.wire import OMITTED_CLASS

names = st.text(max_size=8)


@st.composite
def medias(draw: st.DrawFn) -> Media:
    source = draw(st.sampled_from([None, *MEDIA_SOURCES]))
    content = "" if source is None else draw(st.text(max_size=12))
    return Media(draw(st.sampled_from(MediaKind)), draw(st.none() | names), source, content)


scalars: st.SearchStrategy[Value] = st.one_of(
    st.just(NULL),
    st.booleans().map(Bool),
    st.integers(I64_MIN, I64_MAX).map(Int),
    st.floats(allow_nan=True, allow_infinity=True).map(Float),
    st.integers().map(lambda n: BigInt(str(n))),
    st.text(max_size=20).map(String),
    st.binary(max_size=20).map(Bytes),
    st.builds(Enum, names, names),
    medias(),
    st.text(max_size=20).map(Omitted),
)


def _containers(children: st.SearchStrategy[Value]) -> st.SearchStrategy[Value]:
    entries = st.lists(st.tuples(names, children), max_size=5).map(tuple)
    return st.one_of(
        st.lists(children, max_size=5).map(lambda xs: List(tuple(xs))),
        entries.map(Map),
        st.builds(Class, names.filter(lambda n: n != OMITTED_CLASS), entries),
    )


values: st.SearchStrategy[Value] = st.recursive(scalars, _containers, max_leaves=25)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclasses.dataclass
class Point:
    x: Any
    y: Any


py_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # includes ints far outside i64
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.sampled_from(Color),
)


def _py_containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.one_of(st.text(max_size=6), st.integers(-5, 5), st.sampled_from(Color))
    return st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=5).map(tuple),
        st.dictionaries(keys, children, max_size=5),
        st.builds(Point, children, children),
        st.frozensets(st.one_of(st.integers(-50, 50), st.text(max_size=4)), max_size=5),
    )


python_objects = st.recursive(py_scalars, _py_containers, max_leaves=25)
