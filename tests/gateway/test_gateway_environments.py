"""``environments.json`` that cannot be read (nesting past the recursion limit, a 5000-digit
integer, hostile bytes, entries of the wrong shape) is ``DependencyUnavailable`` naming the
file, never another exception."""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.gateway.config import Scope
from baml_studio.gateway.environments import EnvironmentsFile
from baml_studio.gateway.errors import DependencyUnavailable
from json_strategies import HOSTILE_BYTES, JSON_VALUES, UNPARSEABLE, shaped

SCOPE = Scope("tn_acme", "prj_billing", "env_prod")


def test_a_file_written_by_add_is_read_back(tmp_path: Path) -> None:
    environments = EnvironmentsFile(tmp_path / "environments.json")
    assert environments.add(SCOPE) and not environments.add(SCOPE)
    assert EnvironmentsFile(tmp_path / "environments.json").is_provisioned(SCOPE)


@pytest.mark.parametrize("body", UNPARSEABLE)
def test_a_file_that_cannot_be_parsed_is_unavailable(tmp_path: Path, body: bytes) -> None:
    path = tmp_path / "environments.json"
    path.write_bytes(body)
    with pytest.raises(DependencyUnavailable, match=r"environments\.json is unreadable"):
        EnvironmentsFile(path).is_provisioned(SCOPE)


ENTRY = shaped({"tenant": st.just("t"), "project": st.just("p"), "environment": st.just("e")})


@settings(max_examples=100, deadline=None)
@given(
    HOSTILE_BYTES
    | shaped({"environments": st.lists(ENTRY | JSON_VALUES, max_size=3)}).map(
        lambda document: json.dumps(document).encode()
    )
)
def test_fuzz_environments_files(body: bytes) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "environments.json"
        path.write_bytes(body)
        with contextlib.suppress(DependencyUnavailable):
            assert isinstance(EnvironmentsFile(path).is_provisioned(SCOPE), bool)
