"""Program identity: a conservative content hash of the compiled source files (facts §3.4).

::

    program_hash = SHA-256( "baml-program-v1"
                          ‖ framed(baml_version utf8)
                          ‖ for each file, sorted by path bytes ascending:
                                framed(path utf8) ‖ framed(file bytes) )
    framed(x)    = len(x) as u64 big-endian ‖ x
    program_id   = program_hash[0:16]

Framing choice: the facts quote two framings — the spec text's ``path ‖ 0x00 ‖ bytes ‖ 0x00``
and the implementation log's "every variable-length field is length-framed". The golden
``e98260b8…3049`` (version ``0.17.0``, files ``a.baml = b"alpha"`` and ``b.baml = b"beta"``) is
reproduced only by the length-framed form with u64 big-endian prefixes, so that is what we
implement. Length framing also keeps paths or contents that contain ``0x00`` unambiguous.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

PROGRAM_DOMAIN = b"baml-program-v1"


def _framed(data: bytes) -> bytes:
    return len(data).to_bytes(8, "big") + data


def program_hash(baml_version: str, files: Mapping[str, bytes]) -> bytes:
    """The 32-byte program hash over ``files`` (path → bytes); input order does not matter."""
    hasher = hashlib.sha256(PROGRAM_DOMAIN)
    hasher.update(_framed(baml_version.encode("utf-8")))
    for path_bytes, content in sorted((path.encode("utf-8"), data) for path, data in files.items()):
        hasher.update(_framed(path_bytes))
        hasher.update(_framed(bytes(content)))
    return hasher.digest()


def program_id(baml_version: str, files: Mapping[str, bytes]) -> bytes:
    """``program_hash[0:16]``, the 16-byte ProgramId (shown as 32 lowercase hex)."""
    return program_hash(baml_version, files)[:16]
