"""``baml clean``: remove a whole ``.baml/profiles-v1`` tree when nothing has it open."""

from __future__ import annotations

import shutil
from pathlib import Path

from baml_studio.store.config import BAML_DIR_NAME, STORE_DIR_NAME
from baml_studio.store.errors import InvalidStoreRoot, StoreInUse, StoreIoError
from baml_studio.store.layout import StoreLayout
from baml_studio.store.locks import FileLock, LockContended


def clean_profiles_v1(root: Path) -> bool:
    """Remove ``root`` (which must be ``<...>/.baml/profiles-v1``); True if it existed.

    Takes ``profiles-v1.lock`` exclusive without waiting (an open writer or an in-flight reader
    call makes it raise StoreInUse), then locks and unlocks ``publish.lock`` so no publication
    is mid-flight, then deletes the tree. ``.baml/history`` and the lock file are left alone.
    Raises InvalidStoreRoot, StoreInUse or StoreIoError.
    """
    root = Path(root)
    if root.name != STORE_DIR_NAME or root.parent.name != BAML_DIR_NAME or root.is_symlink():
        raise InvalidStoreRoot(root)
    layout = StoreLayout(root)
    if not root.parent.is_dir():
        return False
    try:
        lease = FileLock.acquire(layout.lease_lock, exclusive=True, blocking=False)
    except LockContended as exc:
        raise StoreInUse(layout.lease_lock) from exc
    except OSError as exc:
        raise StoreIoError(layout.lease_lock, exc) from exc
    with lease:
        if not root.exists():
            return False
        try:
            if layout.publish_lock.exists():
                FileLock.acquire(layout.publish_lock, exclusive=True, create=False).release()
            shutil.rmtree(root)
        except OSError as exc:
            raise StoreIoError(root, exc) from exc
    return True
