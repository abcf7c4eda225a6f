"""The CAS scan: every unshipped file found, settled shard directories not listed again."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from baml_studio.publisher import collect_cas
from baml_studio.publisher.collect_cas import _scan_unshipped
from baml_studio.publisher.state import PublishState
from baml_studio.store.layout import StoreLayout, parse_cas_file_name

OLD_NS = 10_000_000_000
"""How far back a test sets a shard directory's mtime to make it settled."""


def _cid(n: int) -> bytes:
    return hashlib.sha256(n.to_bytes(4, "big")).digest()


def _put(root: Path, cid: bytes) -> Path:
    path = StoreLayout(root).cas_path(cid)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"value " + cid)
    return path


def _age(directory: Path, mtime_ns: int | None = None) -> int:
    """Set ``directory``'s mtime (by default well in the past); the mtime it now has."""
    mtime_ns = time.time_ns() - OLD_NS if mtime_ns is None else mtime_ns
    os.utime(directory, ns=(mtime_ns, mtime_ns))
    return mtime_ns


def _found(state: PublishState) -> set[bytes]:
    return {file.cid for file in _scan_unshipped(state)}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / ".baml" / "profiles-v1"
    (root / "cas" / "values").mkdir(parents=True)
    return root


def _shipped_store(root: Path, n: int = 40) -> tuple[PublishState, list[bytes]]:
    """``n`` CAS files, all shipped, their shard directories settled and listed twice (the
    first listing follows the ledger's load, which forgets marks)."""
    cids = [_cid(i) for i in range(n)]
    for cid in cids:
        _put(root, cid)
    state = PublishState(root)
    state.mark_shipped(cids)
    for cid in cids:
        _age(StoreLayout(root).cas_path(cid).parent)
    assert _found(state) == set()
    assert _found(state) == set()
    assert state.cas_scan.marks  # settled directories were marked
    return state, cids


def test_a_new_file_is_found_in_a_settled_directory(root: Path) -> None:
    state, cids = _shipped_store(root)
    new = bytes.fromhex(StoreLayout(root).cas_path(cids[5]).parent.name) + bytes(31)
    assert StoreLayout(root).cas_path(new).parent.name in state.cas_scan.marks
    _put(root, new)
    assert _found(state) == {new}
    assert _found(state) == {new}  # still unshipped: found again
    state.mark_shipped([new])
    assert _found(state) == set()


def test_a_settled_directory_is_not_listed_until_its_mark_moves_or_the_full_listing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose arrival left the directory's mtime where it was (as a coarse timestamp
    can) is not seen while the mark holds, which shows the scan skips the directory; the
    periodic full listing finds it."""
    state, cids = _shipped_store(root)
    shard = StoreLayout(root).cas_path(cids[0]).parent
    mtime_ns = os.stat(shard).st_mtime_ns
    assert shard.name in state.cas_scan.marks
    hidden = bytes.fromhex(shard.name) + bytes(31)  # a CID in the same shard
    _put(root, hidden)
    _age(shard, mtime_ns)
    assert _found(state) == set()
    monkeypatch.setattr(collect_cas, "FULL_SCAN_SECONDS", 0.0)
    assert _found(state) == {hidden}


def test_a_directory_changed_just_before_the_scan_gets_no_mark(root: Path) -> None:
    state, _ = _shipped_store(root, n=1)
    shard = StoreLayout(root).cas_path(_cid(0)).parent
    recent = _age(shard, time.time_ns())
    assert _found(state) == set()
    assert shard.name not in state.cas_scan.marks
    late = bytes.fromhex(shard.name) + bytes(31)
    _put(root, late)
    _age(shard, recent)  # the same timestamp, as a file created in the same tick leaves it
    assert _found(state) == {late}


@pytest.mark.parametrize("by", ["this_state", "another_process"])
def test_entries_leaving_the_ledger_forget_every_mark(root: Path, by: str) -> None:
    """A file whose ledger entry goes while the file stays (another publisher's rewrite, a
    damaged line dropped on reload, ``forget_shipped``) is unshipped again and is found,
    though its directory kept its mark."""
    state, cids = _shipped_store(root)
    shard = StoreLayout(root).cas_path(cids[3]).parent
    assert shard.name in state.cas_scan.marks
    (state if by == "this_state" else PublishState(root)).forget_shipped([cids[3]])
    assert _found(state) == {cids[3]}


def test_a_shard_directory_that_goes_and_comes_back_is_listed(root: Path) -> None:
    state, cids = _shipped_store(root, n=1)
    path = StoreLayout(root).cas_path(cids[0])
    path.unlink()
    path.parent.rmdir()
    state.forget_shipped([cids[0]])
    assert _found(state) == set()
    again = _cid(0)
    _put(root, again)
    _age(path.parent)
    assert _found(state) == {again}


def test_everything_is_found_on_a_first_scan_and_sorted(root: Path) -> None:
    cids = [_cid(i) for i in range(300)]
    for cid in cids:
        _put(root, cid)
    (root / "cas" / "values" / "zz").write_bytes(b"not a directory")
    state = PublishState(root)
    state.mark_shipped(cids[::2])
    files = list(_scan_unshipped(state))
    assert {f.cid for f in files} == set(cids[1::2])
    paths = [f.path for f in files]
    assert paths == sorted(paths)


_HEX = "0123456789abcdefABCDEF "


@given(
    st.one_of(
        st.text(max_size=80),
        st.builds(
            lambda digits, suffix: digits + suffix,
            st.text(_HEX, min_size=62, max_size=66),
            st.sampled_from([".bamlvalue", ".bamlvalue.shipped", ".bamlvalu", ""]),
        ),
        st.binary(min_size=32, max_size=32).map(lambda b: b.hex() + ".bamlvalue"),
    )
)
def test_the_cas_file_name_parser_answers_as_the_pattern(name: str) -> None:
    """``parse_cas_file_name`` (no regular expression: it runs for every listed file) gives
    the CID exactly for ``<64 lowercase hex>.bamlvalue``."""
    match = re.fullmatch(r"([0-9a-f]{64})\.bamlvalue", name)
    assert parse_cas_file_name(name) == (bytes.fromhex(match.group(1)) if match else None)
