"""``TokenFile``: a token read again whenever its file changes, the last good one kept."""

from __future__ import annotations

import logging
import os
import pickle
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.tokenfile import MAX_TOKEN_BYTES, TokenFile, TokenFileError, write_token_file

TOKEN_A = "eyJhbGciOiJFZERTQSJ9.first.sig"
TOKEN_B = "eyJhbGciOiJFZERTQSJ9.second.sig"


def test_a_rotated_token_is_read_at_the_next_call(tmp_path: Path) -> None:
    path = tmp_path / "workload.token"
    write_token_file(path, TOKEN_A)
    token = TokenFile(path)
    assert token() == TOKEN_A and token() == TOKEN_A
    write_token_file(path, TOKEN_B)
    assert token() == TOKEN_B
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["workload.token"]  # no temp file left


def test_surrounding_whitespace_is_not_part_of_the_token(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_bytes(b"\n  " + TOKEN_A.encode() + b" \r\n")
    assert TokenFile(path)() == TOKEN_A


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "does not exist"),
        (b"", "empty"),
        (b" \n\t", "empty"),
        (b"two words", "one token"),
        (b"line\nbreak", "one token"),
        ("tok\u00e9n".encode(), "one token"),
        (b"\xff\xfe", "one token"),
        (b"x" * (MAX_TOKEN_BYTES + 1), "over"),
    ],
)
def test_a_file_without_one_token_is_refused_at_start(
    tmp_path: Path, content: bytes | None, says: str
) -> None:
    path = tmp_path / "workload.token"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(TokenFileError, match=says) as caught:
        TokenFile(path)
    assert str(path) in str(caught.value)


def test_a_directory_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot be read"):
        TokenFile(tmp_path)


def test_a_broken_rotation_keeps_the_last_good_token_and_logs_it_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "workload.token"
    write_token_file(path, TOKEN_A)
    token = TokenFile(path)
    path.write_bytes(b"")  # a writer that truncated the file and died
    with caplog.at_level(logging.WARNING, logger="baml_studio.tokenfile"):
        assert [token() for _ in range(3)] == [TOKEN_A] * 3
    assert len(caplog.records) == 1 and "empty" in caplog.records[0].getMessage()
    assert TOKEN_A not in caplog.text  # tokens are never logged
    path.unlink()  # gone: the token read before stays
    assert token() == TOKEN_A
    write_token_file(path, TOKEN_B)
    assert token() == TOKEN_B


def test_pickled_as_its_path_and_read_again_by_the_receiver(tmp_path: Path) -> None:
    path = tmp_path / "workload.token"
    write_token_file(path, TOKEN_A)
    sent = pickle.dumps(TokenFile(path))
    write_token_file(path, TOKEN_B)
    received = pickle.loads(sent)
    assert isinstance(received, TokenFile) and received() == TOKEN_B
    assert TOKEN_A not in repr(received) and str(path) in repr(received)


def test_readers_on_many_threads_see_the_old_or_the_new_token_only(tmp_path: Path) -> None:
    path = tmp_path / "workload.token"
    write_token_file(path, "token-0")
    token = TokenFile(path)
    seen: set[str] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.add(token())

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    try:
        for n in range(1, 200):
            write_token_file(path, f"token-{n}")
    finally:
        done.set()
        for reader in readers:
            reader.join()
    assert seen <= {f"token-{n}" for n in range(200)}
    assert token() == "token-199"


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=300) | st.text(max_size=80).map(str.encode))
def test_whatever_the_file_turns_into_a_call_returns_a_token(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "fuzzed.token"
    write_token_file(path, TOKEN_A)
    token = TokenFile(path)
    path.write_bytes(content)
    os.utime(path, ns=(1, 1))  # a new stamp even where the write kept size and time
    got = token()
    stripped = content.strip()
    valid = bool(stripped) and stripped.isascii() and all(0x20 < c != 0x7F for c in stripped)
    assert got == (stripped.decode() if valid else TOKEN_A)
