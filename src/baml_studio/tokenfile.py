"""A bearer token kept in a file that something else rotates.

Workload tokens live at most an hour (``control.identity.MAX_TTL_S``), so a long-running
``projector`` or ``serve dataplane`` cannot hold one token for its life. Given
``--token-file`` (``--workload-token-file``), it holds a :class:`TokenFile` instead: a
callable the workload API's clients ask before every request
(:mod:`baml_studio.projector.control_client` accepts a token or such a callable), which reads
the file again whenever it changed (another inode, size or modification time). Whoever rotates
the token (``baml-studio up``, a secrets sidecar, a cron job running ``admin tokens issue``)
writes the new one to a temp file and renames it over the old, so a reader sees the old token
or the new one, never half of either.

A file that cannot be read, or holds no token, after it was read once keeps the last good
token (logged once per change): a failed rotation must not stop the service, and the control
plane's 401 says when the kept token is no longer good. At construction the file must hold a
token (:class:`TokenFileError`, a ``ValueError`` naming the file and the fix).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

log = logging.getLogger(__name__)

MAX_TOKEN_BYTES = 16 * 1024
"""More than any token we issue (a few hundred bytes); a larger file is not a token."""


class TokenFileError(ValueError):
    """The token file is missing, unreadable, empty, too large, or not one line of ASCII."""


class TokenFile:
    """``token_file()`` is the token in the file now (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        stamp = self._stamp()
        if stamp is None:
            raise TokenFileError(f"token file {self.path} does not exist; write the token to it")
        self._token = self._read_checked()
        self._seen = stamp
        self._complained: tuple[int, int, int] | None = None

    def __reduce__(self) -> tuple[type[TokenFile], tuple[Path]]:
        """Pickled as its path (``projector --processes`` hands its config to helper
        processes): the helper reads the file itself."""
        return (TokenFile, (self.path,))

    def __repr__(self) -> str:
        return f"TokenFile({str(self.path)!r})"

    def __call__(self) -> str:
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return self._token
        with self._lock:
            if stamp == self._seen:
                return self._token
            try:
                self._token = self._read_checked()
            except TokenFileError as exc:
                if self._complained != stamp:
                    self._complained = stamp
                    log.warning("%s; keeping the token read before", exc)
                return self._token
            self._seen = stamp
            log.info("token file %s: a new token read", self.path)
            return self._token

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return (found.st_ino, found.st_size, found.st_mtime_ns)

    def _read_checked(self) -> str:
        try:
            with open(self.path, "rb") as file:
                raw = file.read(MAX_TOKEN_BYTES + 1)
        except OSError as exc:
            raise TokenFileError(f"token file {self.path} cannot be read: {exc}") from None
        if len(raw) > MAX_TOKEN_BYTES:
            raise TokenFileError(
                f"token file {self.path} is over {MAX_TOKEN_BYTES} bytes: it should hold one token"
            )
        text = raw.strip()
        if not text:
            raise TokenFileError(f"token file {self.path} is empty; write the token to it")
        if not text.isascii() or any(c <= 0x20 or c == 0x7F for c in text):
            raise TokenFileError(
                f"token file {self.path} must hold one token (printable ASCII, no spaces or "
                "line breaks inside)"
            )
        return text.decode("ascii")


def write_token_file(path: Path, token: str) -> None:
    """Replace the token in ``path`` as a reader expects: a temp file beside it, made
    readable by its owner only, fsynced, then renamed over ``path``."""
    path = Path(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(token + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
