"""The filesystem port's rename that never replaces, and the group commit's temp names."""

from __future__ import annotations

import errno
import uuid
from pathlib import Path

import pytest

from baml_studio.store import OsFileSystem, StoreLayout, fsops
from baml_studio.store.layout import uuid4_hexes


@pytest.fixture(params=["renameat2", "recheck"])
def fs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> OsFileSystem:
    """The real port, with ``renameat2`` (where libc has it) and with the portable fallback."""
    if request.param == "recheck":
        monkeypatch.setattr(fsops, "_renameat2", None)
    elif fsops._renameat2 is None:
        pytest.skip("no renameat2 in this libc")
    return OsFileSystem()


def test_rename_new_moves_onto_an_absent_path(tmp_path: Path, fs: OsFileSystem) -> None:
    src, dst = tmp_path / "a.pending", tmp_path / "b.bamlvalue"
    src.write_bytes(b"ours")
    fs.rename_new(str(src), str(dst))
    assert dst.read_bytes() == b"ours"
    assert not src.exists()


@pytest.mark.parametrize("existing", ["file", "dangling symlink", "directory"])
def test_rename_new_never_replaces_what_is_there(
    tmp_path: Path, fs: OsFileSystem, existing: str
) -> None:
    src, dst = tmp_path / "a.pending", tmp_path / "b.bamlvalue"
    src.write_bytes(b"ours")
    if existing == "file":
        dst.write_bytes(b"theirs")
    elif existing == "directory":
        dst.mkdir()
    else:
        dst.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        fs.rename_new(src, dst)
    assert src.read_bytes() == b"ours"  # left for the caller to discard
    if existing == "file":
        assert dst.read_bytes() == b"theirs"
    assert dst.is_symlink() == (existing == "dangling symlink")


def test_rename_new_reports_other_errors_as_oserror(tmp_path: Path, fs: OsFileSystem) -> None:
    with pytest.raises(OSError) as caught:
        fs.rename_new(tmp_path / "absent", tmp_path / "b")
    assert caught.value.errno == errno.ENOENT
    assert not isinstance(caught.value, FileExistsError)


def test_rename_new_falls_back_where_the_filesystem_refuses_renameat2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``EINVAL`` (a filesystem without ``RENAME_NOREPLACE``) takes the recheck-and-rename."""

    def refuses(*_args: object) -> int:
        fsops.ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(fsops, "_renameat2", refuses)
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_bytes(b"ours")
    OsFileSystem().rename_new(src, dst)
    assert dst.read_bytes() == b"ours"
    src.write_bytes(b"again")
    with pytest.raises(FileExistsError):
        OsFileSystem().rename_new(src, dst)


def test_temp_names_are_fresh_version_4_uuids_under_tmp(tmp_path: Path) -> None:
    layout = StoreLayout(tmp_path / "profiles-v1")
    names = layout.new_tmp_names(500)
    assert len(set(names)) == 500
    for name in names:
        path = Path(name)
        assert path.parent == layout.tmp_dir and path.suffix == ".pending"
        parsed = uuid.UUID(hex=path.stem)
        assert (parsed.version, parsed.variant, parsed.hex) == (4, uuid.RFC_4122, path.stem)
    assert uuid4_hexes(0) == []


def test_cas_path_str_is_cas_path(tmp_path: Path) -> None:
    layout = StoreLayout(tmp_path / "profiles-v1")
    cid = bytes(range(32))
    assert Path(layout.cas_path_str(cid)) == layout.cas_path(cid)
