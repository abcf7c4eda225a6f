"""What the CLI's location options share: ``--derived``, the root of the Lance datasets, checked
when the command starts (``projector``, ``sweep``, ``replay``, ``compact``, ``serve
dataplane``), and the local store a reader opens (``query``, ``store check``)."""

from __future__ import annotations

import sys
from pathlib import Path

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


def require_store(root: Path, exit_code: int) -> None:
    """Exit with ``exit_code`` and the reason unless ``root`` is a profiles-v1 store: a missing
    directory, or one that holds nothing of a store (``--store /etc`` read as an empty store)."""
    from baml_studio.store.layout import StoreLayout

    if not root.is_dir():
        click.echo(f"error: no store at {root} (run `baml-studio demo --store {root}`)", err=True)
        sys.exit(exit_code)
    if not StoreLayout(root).is_store():
        click.echo(
            f"error: {root} is not a profiles-v1 store (no streams/, cas/ or usage.state in it)",
            err=True,
        )
        sys.exit(exit_code)
