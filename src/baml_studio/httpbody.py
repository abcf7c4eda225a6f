"""Reading a request body within a limit, for the gateway's and the control plane's apps."""

from __future__ import annotations

from starlette.requests import Request

from baml_studio.apierrors import PayloadTooLarge


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or ``PayloadTooLarge`` (413 ``request_too_large``) as soon as the
    declared or streamed size passes ``limit``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
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
