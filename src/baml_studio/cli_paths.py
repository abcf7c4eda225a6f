"""What the CLI's location options share: ``--derived``, the root of the Lance datasets, checked
when the command starts (``projector``, ``sweep``, ``replay``, ``compact``, ``serve
dataplane``)."""

from __future__ import annotations

import click


def dataset_root(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: ``value`` when it is a local path or a URI Lance opens, else a bad
    parameter (exit 2) naming the schemes it takes."""
    if value is None:
        return None
    from baml_studio.projector.lance_store import check_dataset_root

    try:
        return check_dataset_root(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
