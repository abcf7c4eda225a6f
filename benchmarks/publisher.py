"""Publisher flush throughput against the raw compress+hash limit, measured in the same run.

    .venv/bin/python benchmarks/publisher.py [--executions 400] [--processes 2]

Builds a demo store with the workload, starts the real embedded gateway (directory bucket and
SQLite queue) on 127.0.0.1, runs one flush and reports original MB/s and executions/s. The
baseline is zstd at the publisher's level plus SHA-256 over the same original bytes, in memory.
"""

from __future__ import annotations

import argparse
import hashlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# the real-gateway rig lives in the tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "publisher"))

from publisher_fake_gateway import free_port
from publisher_real_gateway import real_gateway

from baml_studio.publisher import Publisher
from baml_studio.publisher.config import DEFAULT_ZSTD_LEVEL
from baml_studio.publisher.pack import compress
from baml_studio.workload import run_workload


def raw_limit(root: Path) -> tuple[int, float]:
    files = [
        p.read_bytes()
        for p in root.rglob("*")
        if p.suffix in (".bamlmeta", ".bamldata", ".bamlvalue")
    ]
    start = time.perf_counter()
    for data in files:
        hashlib.sha256(compress(data, DEFAULT_ZSTD_LEVEL)).digest()
    return sum(map(len, files)), time.perf_counter() - start


@contextmanager
def dataplane_process(data_dir: Path) -> Iterator[tuple[str, str]]:
    """``baml-studio serve dataplane`` in its own process, as deployed; yields (URL, token)."""
    port = free_port()
    cli = [sys.executable, "-m", "baml_studio.cli"]
    token = subprocess.run(
        [*cli, "tokens", "mint", "--data", str(data_dir), "--tenant", "bench",
         "--project", "bench", "--environment", "bench"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    server = subprocess.Popen(
        [*cli, "serve", "dataplane", "--data", str(data_dir), "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            raise SystemExit("the data plane did not start")
        yield f"http://127.0.0.1:{port}", token
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--executions", type=int, default=400)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--in-process", action="store_true",
        help="serve the data plane in this process (shares the GIL with the publisher)",
    )  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store" / "profiles-v1"
        run_workload(root, executions=args.executions, processes=args.processes, seed=7)
        total, limit_s = raw_limit(root)
        serve = (
            _in_process(Path(tmp) / "dataplane")
            if args.in_process
            else dataplane_process(Path(tmp) / "dataplane")
        )
        with serve as (url, token):
            publisher = Publisher(root, url, token)
            publisher.refresh_config()
            start = time.perf_counter()
            report = publisher.flush()
            flush_s = time.perf_counter() - start
        assert report.complete, report.problems
    print(f"data plane: {'in this process' if args.in_process else 'its own process'}")
    mb = 1e6
    rows = [
        (f"raw limit (zstd L{DEFAULT_ZSTD_LEVEL} + SHA-256, no I/O)", total / mb / limit_s,
         args.executions / limit_s),
        ("flush (collect + authorize + PUT + state)", report.original_bytes / mb / flush_s,
         args.executions / flush_s),
    ]  # fmt: skip
    print(f"store: {total / mb:.1f} MB original, {report.objects} objects, "
          f"{len(report.uploaded)} PUTs, {args.executions} executions")  # fmt: skip
    print(f"{'measure':<46} {'MB/s':>10} {'exec/s':>10}")
    for name, mbps, eps in rows:
        print(f"{name:<46} {mbps:>10.1f} {eps:>10.0f}")
    print(f"ratio flush/limit: {rows[1][1] / rows[0][1]:.2f} (goal >= 0.50)")


@contextmanager
def _in_process(data_dir: Path) -> Iterator[tuple[str, str]]:
    with real_gateway(data_dir) as (url, token, _):
        yield url, token


if __name__ == "__main__":
    main()
