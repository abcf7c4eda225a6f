"""Configuration validation and the adapter factory."""

from __future__ import annotations

from pathlib import Path

import pytest
from objectstore_harness import SECRET

from baml_studio.objectstore import (
    DirectoryBucketConfig,
    InvalidArgument,
    ObjectStore,
    S3Config,
    open_object_store,
)
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.s3 import S3ObjectStore


@pytest.mark.parametrize("name", ["ab", "Upper", "-lead", "trail-", "a..b", "a_b", "x" * 64])
def test_bad_bucket_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidArgument, match="bucket name"):
        DirectoryBucketConfig(tmp_path, name, "http://127.0.0.1:1", SECRET)
    with pytest.raises(InvalidArgument, match="bucket name"):
        S3Config(bucket=name)


def test_directory_config_checks_secret_and_base_url(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="at least 32"):
        DirectoryBucketConfig(tmp_path, "bkt", "http://127.0.0.1:1", b"short")
    with pytest.raises(InvalidArgument, match="http"):
        DirectoryBucketConfig(tmp_path, "bkt", "127.0.0.1:1", SECRET)
    config = DirectoryBucketConfig(tmp_path, "bkt", "http://127.0.0.1:1", SECRET)
    assert SECRET.decode() not in repr(config)


@pytest.mark.parametrize(("size", "expires_in"), [(-1, 60), (1, 0), (1, 7 * 24 * 3600 + 1)])
def test_presign_arguments_are_checked(tmp_path: Path, size: int, expires_in: int) -> None:
    for config in (
        DirectoryBucketConfig(tmp_path, "bkt", "http://127.0.0.1:1", SECRET),
        S3Config(
            bucket="bkt",
            endpoint_url="http://127.0.0.1:1",
            access_key_id="a",
            secret_access_key="b",
        ),
    ):
        store = open_object_store(config)
        with pytest.raises(InvalidArgument):
            store.presign_put("k", size, "ab" * 32, expires_in)


def test_factory_opens_the_configured_adapter(tmp_path: Path) -> None:
    directory = open_object_store(DirectoryBucketConfig(tmp_path, "bkt", "http://h", SECRET))
    s3 = open_object_store(S3Config(bucket="bkt", endpoint_url="http://127.0.0.1:1"))
    assert isinstance(directory, DirectoryBucket)
    assert isinstance(s3, S3ObjectStore)
    assert isinstance(directory, ObjectStore)
    assert isinstance(s3, ObjectStore)
    assert (tmp_path / "bkt" / "objects").is_dir()
