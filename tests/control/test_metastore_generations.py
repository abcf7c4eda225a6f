"""Metastore conformance: the active generation per environment and its history, including
concurrent bumps from several threads and several stores (as from several processes)."""

from __future__ import annotations

import threading

import pytest
from metastore_servers import T0, Clock

from baml_studio.control.metastore import Metastore, NotFoundInMetastore
from baml_studio.control.model import GenerationRecord
from baml_studio.gateway.config import Scope

pytest_plugins = ("metastore_servers",)

PROD = Scope("acme", "web", "prod")


@pytest.fixture
def env(metastore: Metastore) -> Metastore:
    metastore.create_tenant("acme")
    metastore.create_project("acme", "web")
    metastore.create_environment("acme", "web", "prod")
    return metastore


def test_bump_activates_and_records_the_next_generation(
    env: Metastore, metastore_clock: Clock
) -> None:
    assert env.active_generation(PROD) == "gen_1"
    metastore_clock.now += 10
    assert env.bump_generation(PROD) == "gen_2"
    assert env.active_generation(PROD) == "gen_2"
    environment = env.get_environment(PROD)
    assert environment is not None
    assert environment.active_generation == "gen_2"
    assert env.generations(PROD) == [
        GenerationRecord("acme", "web", "prod", "gen_1", T0, False),
        GenerationRecord("acme", "web", "prod", "gen_2", T0 + 10, True),
    ]
    assert env.generation_exists(PROD, "gen_1")
    assert env.generation_exists(PROD, "gen_2")
    assert not env.generation_exists(PROD, "gen_3")
    assert not env.generation_exists(PROD, "bogus")


def test_history_is_in_numeric_order(env: Metastore) -> None:
    for _ in range(10):
        env.bump_generation(PROD)
    history = [record.generation for record in env.generations(PROD)]
    assert history == [f"gen_{n}" for n in range(1, 12)]
    assert [record.active for record in env.generations(PROD)] == [False] * 10 + [True]


def test_generations_are_per_environment(env: Metastore) -> None:
    env.create_environment("acme", "web", "dev")
    dev = Scope("acme", "web", "dev")
    env.bump_generation(PROD)
    assert env.active_generation(dev) == "gen_1"
    assert not env.generation_exists(dev, "gen_2")


def test_unknown_environment_is_not_found(env: Metastore) -> None:
    missing = Scope("acme", "web", "staging")
    with pytest.raises(NotFoundInMetastore, match="acme/web/staging"):
        env.active_generation(missing)
    with pytest.raises(NotFoundInMetastore):
        env.bump_generation(missing)
    with pytest.raises(NotFoundInMetastore):
        env.generations(missing)
    assert not env.generation_exists(missing, "gen_1")


@pytest.mark.parametrize("separate_stores", [False, True], ids=["one-store", "store-per-thread"])
def test_concurrent_bumps_get_distinct_generations(
    env: Metastore, metastore_url: str, separate_stores: bool
) -> None:
    threads, bumps = 4, 5
    stores = [Metastore(metastore_url) if separate_stores else env for _ in range(threads)]
    start = threading.Barrier(threads)
    results: list[list[str]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def bump(index: int) -> None:
        try:
            start.wait()
            for _ in range(bumps):
                results[index].append(stores[index].bump_generation(PROD))
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    workers = [threading.Thread(target=bump, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if separate_stores:
        for opened in stores:
            opened.close()

    assert errors == []
    produced = [generation for result in results for generation in result]
    expected = {f"gen_{n}" for n in range(2, threads * bumps + 2)}
    assert len(produced) == len(set(produced)) == threads * bumps
    assert set(produced) == expected
    assert {record.generation for record in env.generations(PROD)} == expected | {"gen_1"}
    assert env.active_generation(PROD) == f"gen_{threads * bumps + 1}"
