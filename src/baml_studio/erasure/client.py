"""The erasure calls of a coordinator client (openapi.yaml ``createErasure``, ``getErasure``).

:class:`ErasureClient` is a :class:`~baml_studio.coordinator.client.CoordinatorClient` (same
token, request ids, typed errors) with two more calls. Errors are the coordinator client's:
``CoordinatorError`` for an ``ErrorResponse`` answer, ``CoordinatorUnavailable`` for no answer,
``CoordinatorProtocolError`` for a success whose body is not an ``Erasure``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from baml_studio.coordinator.client import CoordinatorClient, answer_object

ENVIRONMENT_HEADER = "X-Baml-Environment-Id"
_STATES = ("queued", "running", "succeeded", "failed")


class ErasureClient(CoordinatorClient):
    def create_erasure(
        self, selector: dict[str, Any], idempotency_key: str, environment: str | None = None
    ) -> dict[str, Any]:
        """``POST /v1/erasures`` with one selector (an ``ErasureRequest``); the ``Erasure``."""
        headers = {"Idempotency-Key": idempotency_key}
        if environment is not None:
            headers[ENVIRONMENT_HEADER] = environment
        return _erasure(self._call("POST", "/v1/erasures", json_body=selector, headers=headers))

    def get_erasure(self, erasure_id: str) -> dict[str, Any]:
        """``GET /v1/erasures/{erasure_id}``: state, ``streams_matched``, ``streams_deleted``."""
        if not erasure_id:
            raise ValueError("the erasure id is empty")
        return _erasure(self._call("GET", "/v1/erasures/" + quote(erasure_id, safe="")))


def _erasure(response: httpx.Response) -> dict[str, Any]:
    return answer_object(
        response,
        "erasure",
        "an Erasure",
        lambda body: isinstance(body.get("erasure_id"), str) and body.get("state") in _STATES,
    )
