"""Names, paths, root resolution and the .baml/.gitignore rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.store import PROFILE_DIR_ENV, Plane, StoreLayout, StreamStore, resolve_store_root
from baml_studio.store.layout import (
    parse_cas_file_name,
    parse_segment_name,
    parse_stream_dir_name,
    segment_name,
)

SEQ = st.integers(min_value=1, max_value=(1 << 64) - 1)


@given(SEQ, st.sampled_from(list(Plane)))
def test_segment_names_round_trip(sequence: int, plane: Plane) -> None:
    name = segment_name(plane, sequence)
    assert len(name.partition(".")[0]) == 20
    assert parse_segment_name(plane, name) == sequence


def test_segment_name_examples() -> None:
    assert segment_name(Plane.META, 1) == "00000000000000000001.bamlmeta"
    assert segment_name(Plane.DATA, 42) == "00000000000000000042.bamldata"
    with pytest.raises(ValueError):
        segment_name(Plane.META, 0)


@pytest.mark.parametrize(
    "name",
    [
        "0000000000000000001.bamlmeta",
        "000000000000000000001.bamlmeta",
        "00000000000000000001.bamldata",
        "00000000000000000001.BAMLMETA",
        "00000000000000000001",
        "0000000000000000000x.bamlmeta",
        "+0000000000000000001.bamlmeta",
        "０0000000000000000001.bamlmeta",
        "00000000000000000000.bamlmeta",
        "18446744073709551616.bamlmeta",
        "00000000000000000001.bamlmeta.pending",
    ],
)
def test_ill_formed_segment_names_are_ignored(name: str) -> None:
    assert parse_segment_name(Plane.META, name) is None


def test_stream_and_cas_names() -> None:
    assert parse_stream_dir_name("00" * 16) == bytes(16)
    assert parse_stream_dir_name("AB" * 16) is None
    assert parse_stream_dir_name("ab" * 15) is None
    assert parse_stream_dir_name("ab" * 16 + ".tmp") is None
    assert parse_cas_file_name("ab" * 32 + ".bamlvalue") == bytes([0xAB]) * 32
    assert parse_cas_file_name("ab" * 32 + ".pending") is None


def test_paths(tmp_path: Path) -> None:
    layout = StoreLayout(tmp_path / ".baml" / "profiles-v1")
    euid = bytes(range(16))
    assert layout.lease_lock == tmp_path / ".baml" / "profiles-v1.lock"
    assert layout.segment_path(euid, Plane.DATA, 7) == (
        layout.root / "streams" / euid.hex() / "data" / "00000000000000000007.bamldata"
    )
    assert layout.stream_lock(euid) == layout.root / "streams" / euid.hex() / "stream.lock"
    assert layout.new_tmp_path().parent == layout.root / "tmp"
    assert layout.new_tmp_path().name.endswith(".pending")
    assert len(layout.new_tmp_path().stem) == 32


def test_resolve_store_root(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    assert resolve_store_root(project, {}) == project / ".baml" / "profiles-v1"
    assert resolve_store_root(project, {PROFILE_DIR_ENV: ""}) == project / ".baml" / "profiles-v1"
    assert resolve_store_root(project, {PROFILE_DIR_ENV: "/srv/p"}) == Path("/srv/p")
    assert resolve_store_root(project, {PROFILE_DIR_ENV: "rel/p"}) == project / "rel" / "p"


def _open_close(root: Path) -> None:
    StreamStore.open(root, bytes(16)).close()


def test_gitignore_is_created(root: Path) -> None:
    _open_close(root)
    assert (root.parent / ".gitignore").read_text() == "*\n"


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        ("history/\n", "history/\n*\n"),
        ("history/", "history/\n*\n"),
        ("a\n*\nb\n", "a\n*\nb\n"),
        ("*  \n", "*  \n"),
        ("**\n/*\n", "**\n/*\n*\n"),
    ],
)
def test_gitignore_is_appended_once(root: Path, existing: str, expected: str) -> None:
    root.parent.mkdir(parents=True)
    (root.parent / ".gitignore").write_text(existing)
    _open_close(root)
    _open_close(root)
    assert (root.parent / ".gitignore").read_text() == expected


def test_custom_root_outside_baml_gets_no_gitignore(tmp_path: Path) -> None:
    root = tmp_path / "custom" / "profiles-v1"
    _open_close(root)
    assert not (root.parent / ".gitignore").exists()
    assert (tmp_path / "custom" / "profiles-v1.lock").is_file()


NEAR_DIGITS = "0123456789aAfF+-_ .\u0661\uff10\u00b2\n"
SEGMENT_NAMES = st.text(max_size=40) | st.builds(
    lambda stem, ext: f"{stem}{ext}",
    st.text(alphabet=NEAR_DIGITS, min_size=18, max_size=22) | SEQ.map("{:020d}".format),
    st.sampled_from([".bamlmeta", ".bamldata", ".BAMLMETA", ".bamlmeta.pending", "", "."]),
)
SEGMENT = re.compile(r"([0-9]{20})\.(bamlmeta|bamldata)", re.ASCII)


@settings(max_examples=500)
@given(SEGMENT_NAMES, st.sampled_from(list(Plane)))
def test_fuzz_any_name_parses_to_its_own_sequence_or_none(name: str, plane: Plane) -> None:
    sequence = parse_segment_name(plane, name)
    expected = SEGMENT.fullmatch(name)
    if expected is None or expected[2] != plane.ext or not 1 <= int(expected[1]) < 1 << 64:
        assert sequence is None
    else:
        assert sequence is not None and segment_name(plane, sequence) == name


STREAM_NAMES = st.text(max_size=40) | st.text(alphabet="0123456789abcdefABG \n\u0661", max_size=34)


@settings(max_examples=500)
@given(STREAM_NAMES)
def test_fuzz_any_name_parses_to_its_own_euid_or_none(name: str) -> None:
    euid = parse_stream_dir_name(name)
    if re.fullmatch(r"[0-9a-f]{32}", name, re.ASCII) is None:
        assert euid is None
    else:
        assert euid is not None and len(euid) == 16 and euid.hex() == name
