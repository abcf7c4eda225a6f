"""Reading a request body within a limit, for the gateway's and the control plane's apps."""

from __future__ import annotations

from starlette.requests import Request

from baml_studio.apierrors import PayloadTooLarge
from baml_studio.wirenumbers import ascii_whole_number


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or ``PayloadTooLarge`` (413 ``request_too_large``) as soon as the
    declared or streamed size passes ``limit``."""
    # a length that is not plain ASCII digits (or absurdly long) is left to the streamed count
    declared = ascii_whole_number(request.headers.get("content-length", ""), max_digits=18)
    if declared is not None and declared > limit:
        raise PayloadTooLarge(
            f"the request body has {declared} bytes; the limit is {limit}",
            code="request_too_large",
        )
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise PayloadTooLarge(
                f"the request body exceeds {limit} bytes", code="request_too_large"
            )
        chunks.append(chunk)
    return b"".join(chunks)
