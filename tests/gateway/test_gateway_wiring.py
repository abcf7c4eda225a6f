"""``open_dataplane`` picks how many existence checks an authorize request runs at once: one at a
time for the directory bucket (local system calls), unless ``dataplane.json`` says otherwise."""

from __future__ import annotations

import json
from pathlib import Path

from baml_studio.gateway.service import load_dataplane_config, open_dataplane


def test_the_directory_bucket_checks_objects_in_the_request_thread(tmp_path: Path) -> None:
    data = tmp_path / "dp"
    dataplane = open_dataplane(load_dataplane_config(data, host="127.0.0.1", port=1))
    try:
        assert dataplane.gateway.config.head_concurrency == 1
    finally:
        dataplane.close()


def test_dataplane_json_sets_the_check_concurrency(tmp_path: Path) -> None:
    data = tmp_path / "dp"
    data.mkdir()
    (data / "dataplane.json").write_text(json.dumps({"gateway": {"head_concurrency": 4}}))
    dataplane = open_dataplane(load_dataplane_config(data, host="127.0.0.1", port=1))
    try:
        assert dataplane.gateway.config.head_concurrency == 4
    finally:
        dataplane.close()
