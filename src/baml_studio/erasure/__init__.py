"""Erasure by stream: ``POST /v1/erasures`` and ``GET /v1/erasures/{id}`` (docs/erasure.md).

Modules: :mod:`.selector` (the request), :mod:`.resolve` (selectors to streams through the
public facts), :mod:`.refs` (what each evidence object references, and the index of it),
:mod:`.plan` (the reference count and every decision, before anything is deleted),
:mod:`.steps` (the idempotent steps), :mod:`.store` (SQLite), :mod:`.manager` (the worker and
its state machine), :mod:`.app` (the routes), :mod:`.client` (the CLI's client),
:mod:`.models` (generated from openapi.yaml), :mod:`.config`, :mod:`.errors`.
"""
