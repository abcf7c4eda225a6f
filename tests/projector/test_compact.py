"""Compaction of every scope's private datasets (``projector.compact``) and ``baml-studio
compact``: scopes discovered from the provisioned environments and the derived root, empty
scopes skipped without creating anything, one broken scope reported while the others are
compacted, the data unchanged."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from lance_fixtures import execution_private, invoice
from projector_control_rig import closed_port_url

from baml_studio.cli_projector import compact_command
from baml_studio.gateway.config import Scope
from baml_studio.gateway.environments import EnvironmentsFile
from baml_studio.gateway.service import load_dataplane_config
from baml_studio.projector.compact import (
    compact,
    discover_scopes,
    parse_duration,
    parse_scope,
)
from baml_studio.projector.lance_store import PROJECTED, VALUES, PrivateStore
from baml_studio.projector.service import Projector, ProjectorConfig, open_projector

A = Scope("tn_a", "prj_a", "env_a")
B = Scope("tn_b", "prj_b", "env_b")
EMPTY = Scope("tn_c", "prj_c", "env_c")
BROKEN = Scope("tn_d", "prj_d", "env_d")
INGESTS = 4


@pytest.fixture
def projector(tmp_path: Path) -> Iterator[Projector]:
    dataplane = load_dataplane_config(tmp_path / "dp", host="127.0.0.1", port=8787)
    with open_projector(ProjectorConfig(dataplane, closed_port_url(), "token")) as opened:
        yield opened


def test_the_scopes_share_one_configured_key_budget(tmp_path: Path) -> None:
    """A projector's scopes remember fragment keys in one cache of the configured size, not
    one each: serving many scopes does not multiply the memory."""
    dataplane = load_dataplane_config(tmp_path / "dp", host="127.0.0.1", port=8787)
    config = ProjectorConfig(dataplane, closed_port_url(), "token", lance_key_cache_keys=7)
    with open_projector(config) as opened:
        a, b = opened.private_store(A), opened.private_store(B)
        assert a.key_cache_keys == b.key_cache_keys == 7
        shared = a.fragment_keys
        assert b.fragment_keys is shared
        for store, first in ((a, 0), (b, 10)):
            entries = [invoice(n) for n in range(first, first + 5)]
            store.ingest_values(entries)  # one fragment of 5 keys in each scope
            reads = shared.reads
            assert store.missing_values([e[0] for e in entries]) == set()
            assert shared.reads > reads  # this scope's fragment went into the shared cache
            assert len(shared) <= 7
        assert a.missing_values([invoice(0)[0], invoice(10)[0]]) == {invoice(10)[0]}
    default = ProjectorConfig(dataplane, closed_port_url(), "token")
    assert default.lance_key_cache_keys == PrivateStore(str(tmp_path / "x")).key_cache_keys
    with pytest.raises(ValueError, match="lance_key_cache_keys"):
        ProjectorConfig(dataplane, closed_port_url(), "token", lance_key_cache_keys=-1)


def fill(store: PrivateStore, execution: str) -> list[str]:
    """``INGESTS`` small value ingests (one fragment each) and one execution; the cids."""
    entries = [invoice(n) for n in range(INGESTS * 5)]
    for start in range(0, len(entries), 5):
        store.ingest_values(entries[start : start + 5])
    cids = sorted(e[0] for e in entries)
    store.write_execution(execution, execution, "proc", execution_private(execution, cids))
    return cids


def break_dataset(store: PrivateStore) -> None:
    """Overwrite every manifest of ``values_v1``: the dataset cannot be opened."""
    store.ingest_values([invoice(99)])
    for manifest in (Path(store.root_uri) / VALUES / "_versions").iterdir():
        manifest.write_bytes(b"garbage")


def test_compaction_of_discovered_scopes_folds_fragments_and_builds_indexes(
    projector: Projector,
) -> None:
    cids = {scope: fill(projector.private_store(scope), f"exec-{scope.tenant}") for scope in (A, B)}
    EnvironmentsFile(projector.config.dataplane.environments_path).add(EMPTY)
    assert discover_scopes(projector) == [A, B, EMPTY]

    report = compact(projector)

    by_scope = {s.scope: s for s in report.scopes}
    assert set(by_scope) == {A, B, EMPTY} and report.failed == ()
    assert by_scope[EMPTY].skipped and by_scope[EMPTY].datasets == ()
    assert not Path(by_scope[EMPTY].root_uri).exists()  # nothing created for an empty scope
    for scope in (A, B):
        datasets = {d.name: d for d in by_scope[scope].datasets}
        assert datasets[VALUES].fragments_removed == INGESTS
        assert datasets[VALUES].fragments_added == 1
        assert datasets[VALUES].indexes_created == ("cid_btree",)
        assert datasets[PROJECTED].indexes_created == ("execution_id_btree",)
        store = projector.private_store(scope)
        assert sorted(store.get_values(cids[scope])) == cids[scope]  # the data is unchanged
        assert store.projected([f"exec-{scope.tenant}"]) == {f"exec-{scope.tenant}"}

    again = compact(projector, [A])  # only the scope asked for; nothing left to do
    assert [s.scope for s in again.scopes] == [A]
    assert all(d.indexes_created == () for d in again.scopes[0].datasets)

    future = datetime.now(UTC) + timedelta(days=2)
    old = compact(projector, [B], timedelta(days=1), now=future)
    assert {d.name: d for d in old.scopes[0].datasets}[VALUES].versions_removed >= INGESTS


def test_a_broken_scope_is_reported_and_the_others_are_compacted(projector: Projector) -> None:
    fill(projector.private_store(A), "exec-a")
    break_dataset(projector.private_store(BROKEN))

    report = compact(projector)

    assert [s.scope for s in report.failed] == [BROKEN]
    assert report.failed[0].error is not None and "values_v1" in report.failed[0].error
    fine = next(s for s in report.scopes if s.scope == A)
    assert fine.error is None and fine.datasets
    as_json = json.loads(json.dumps(report.as_dict()))
    assert as_json["failed"] == 1 and len(as_json["scopes"]) == 2


def test_cli_compact_prints_the_report_and_exits_4_on_a_failed_scope(
    projector: Projector, tmp_path: Path
) -> None:
    fill(projector.private_store(A), "exec-a")
    base = ["--data", str(tmp_path / "dp"), "--control-plane", closed_port_url(), "--token", "t"]
    runner = CliRunner()

    result = runner.invoke(compact_command, [*base, "--retention", "12h"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(s["tenant"], s["error"]) for s in report["scopes"]] == [("tn_a", None)]
    assert any(d["indexes_created"] for d in report["scopes"][0]["datasets"])

    break_dataset(projector.private_store(BROKEN))
    failed = runner.invoke(compact_command, base)
    assert failed.exit_code == 4 and "1 scope(s) failed" in failed.stderr
    only = runner.invoke(compact_command, [*base, "--scope", "tn_a/prj_a/env_a"])
    assert only.exit_code == 0 and len(json.loads(only.stdout)["scopes"]) == 1

    assert runner.invoke(compact_command, [*base, "--retention", "7x"]).exit_code == 2
    assert runner.invoke(compact_command, [*base, "--scope", "tn_a/prj_a"]).exit_code == 2
    assert runner.invoke(compact_command, [*base, "--lance-key-cache", "-1"]).exit_code == 2
    scoped = [*base, "--scope", "tn_a/prj_a/env_a"]
    unremembered = runner.invoke(compact_command, [*scoped, "--lance-key-cache", "0"])
    assert unremembered.exit_code == 0, unremembered.output
    assert "Example" in (compact_command.help or "")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 604_800), ("12h", 43_200), ("30m", 1800), ("90s", 90), ("2w", 1_209_600), ("60", 60)],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "d7", "-1d", "7 days", "7x"])
def test_bad_durations_name_the_valid_forms(text: str) -> None:
    with pytest.raises(ValueError, match="unit ms, s, m, h, d or w"):
        parse_duration(text)


def test_a_duration_beyond_a_timedelta_is_refused() -> None:
    with pytest.raises(ValueError, match="too long"):
        parse_duration("9" * 20 + "w")


def test_scopes_parse_and_validate() -> None:
    assert parse_scope("tn/prj/env") == Scope("tn", "prj", "env")
    with pytest.raises(ValueError, match="tenant/project/environment"):
        parse_scope("tn/prj")
    with pytest.raises(ValueError, match="not a valid id"):
        parse_scope("tn/prj/bad id")


def test_the_report_names_live_and_malformed_leases(projector: Projector) -> None:
    store = projector.private_store(A)
    fill(store, "exec-a")
    leased = store.version()
    store.leases.hold(leased, 600)
    (Path(store.root_uri) / "_leases" / "torn.json").write_bytes(b'{"format": "baml')
    report = compact(projector, [A]).as_dict()
    (scope,) = report["scopes"]
    assert scope["leases_live"] == 1 and scope["error"] is None
    assert [Path(p).name for p in scope["leases_malformed"]] == ["torn.json"]
    kept = {d["name"]: d["kept_from_version"] for d in scope["datasets"]}
    assert kept == leased  # every dataset's leased version was the floor it kept from
