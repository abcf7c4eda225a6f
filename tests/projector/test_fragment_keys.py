"""FragmentKeys: presence from remembered fragment keys equals a scan of the version, through
appends, deletions, updates, compaction and a dataset recreated under the same URI."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.projector.fragment_keys import FragmentKeys

SCHEMA = pa.schema([pa.field("k", pa.string(), nullable=False), pa.field("v", pa.int64())])


def rows(keys: Sequence[str], v: int = 0) -> pa.Table:
    return pa.table({"k": list(keys), "v": [v] * len(keys)}, schema=SCHEMA)


def truth(ds: lance.LanceDataset, keys: set[str]) -> set[str]:
    return keys & set(ds.to_table(columns=["k"])["k"].to_pylist())


def scan(
    ds: lance.LanceDataset, fragments: Sequence[lance.LanceFragment], column: str, keys: set[str]
) -> set[str]:
    table = ds.scanner(columns=[column], fragments=fragments).to_table()
    return keys & set(table[column].to_pylist())


def key(i: int) -> str:
    return f"key-{i:03d}"


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.integers(0, 40), min_size=1, max_size=12)),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 40), min_size=1, max_size=6)),
        st.tuples(st.just("update"), st.lists(st.integers(0, 40), min_size=1, max_size=6)),
        st.tuples(st.just("compact"), st.just([])),
        st.tuples(st.just("recreate"), st.lists(st.integers(0, 40), min_size=1, max_size=8)),
    ),
    min_size=1,
    max_size=10,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, budget=st.sampled_from([0, 4, 10, 1_000]))
def test_presence_equals_a_scan_of_each_version(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, list[int]]], budget: int
) -> None:
    uri = str(tmp_path_factory.mktemp("fk") / "d")
    lance.write_dataset(rows([key(0), key(1)]), uri)
    keys = FragmentKeys(budget)
    asked = {key(i) for i in range(41)}
    for op, numbers in ops:
        ds = lance.dataset(uri)
        wanted = sorted({key(i) for i in numbers})
        if op == "append":
            lance.write_dataset(rows(wanted), uri, mode="append")
        elif op == "delete":
            ds.delete("k IN (" + ", ".join(f"'{k}'" for k in wanted) + ")")
        elif op == "update":
            ds.merge_insert("k").when_matched_update_all().execute(rows(wanted, 1))
        elif op == "compact":
            ds.optimize.compact_files(target_rows_per_fragment=1_000)
        else:  # the same URI, new data: fragment ids start again at 0
            shutil.rmtree(uri)
            lance.write_dataset(rows(wanted), uri)
        ds = lance.dataset(uri)
        assert keys.present(ds, "k", asked, scan) == truth(ds, asked), op
        assert len(keys) <= budget


def test_a_second_question_reads_no_fragment(tmp_path: Path) -> None:
    uri = str(tmp_path / "d")
    lance.write_dataset(rows([key(0), key(1)]), uri)
    lance.write_dataset(rows([key(2)]), uri, mode="append")
    keys = FragmentKeys()
    ds = lance.dataset(uri)
    assert keys.present(ds, "k", {key(1), key(2), key(9)}, scan) == {key(1), key(2)}
    assert keys.reads == 2
    lance.write_dataset(rows([key(9)]), uri, mode="append")
    ds = lance.dataset(uri)
    assert keys.present(ds, "k", {key(1), key(2), key(9)}, scan) == {key(1), key(2), key(9)}
    assert keys.reads == 3  # only the new fragment


def test_fragments_over_the_budget_are_scanned_not_remembered(tmp_path: Path) -> None:
    uri = str(tmp_path / "d")
    lance.write_dataset(rows([key(i) for i in range(10)]), uri)
    lance.write_dataset(rows([key(20)]), uri, mode="append")
    keys = FragmentKeys(max_keys=3)
    ds = lance.dataset(uri)
    assert keys.present(ds, "k", {key(3), key(20), key(30)}, scan) == {key(3), key(20)}
    assert (keys.reads, keys.scanned, len(keys)) == (1, 1, 1)


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="max_keys"):
        FragmentKeys(-1)
