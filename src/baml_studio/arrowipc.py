"""Reading an Arrow IPC stream from bytes another process sent (a batch body, a server's answer).

Arrow's stream reader checks the messages but not the buffers they point to, so a stream with
offsets past its data (found by fuzzing damaged streams) reads as a table whose use crashes the
process (a segfault in ``Table.equals``). :func:`read_stream` validates the whole table before
anyone uses it and turns every refusal into :class:`InvalidArrowStream`, which each caller words
as its own typed error (the control plane's 400 ``invalid_body``, the projector's
``ControlPlaneUnavailable``).
"""

from __future__ import annotations

import pyarrow as pa

from baml_studio.format.errors import BamlStudioError


class InvalidArrowStream(BamlStudioError):
    """The bytes are not a valid Arrow IPC stream; the message is Arrow's reason."""


def read_stream(data: bytes) -> pa.Table:
    """The IPC stream's table, fully validated (``Table.validate(full=True)``); raises
    :class:`InvalidArrowStream` for anything else, whatever the bytes are."""
    try:
        with pa.ipc.open_stream(pa.BufferReader(data)) as reader:
            table = reader.read_all()
        table.validate(full=True)  # the module docstring says why
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InvalidArrowStream(str(exc)) from exc
    return table
