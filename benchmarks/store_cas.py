"""CPU per value of the profiler's CAS group commit, against the bare file operations it makes.

The profiler writes every captured value as its own ``cas/sha256/<2 hex>/<64 hex>.bamlvalue``
file (profiles-v1). ``StreamStore.publish_cas_batch`` does it as a group commit: each value
framed and hashed, a temp file created, written and closed, one ``syncfs``, each renamed to its
final path (no-replace), one ``syncfs``, the usage ledger rewritten. The baseline, in the same
run and on the same directory tree, makes the same system calls from a plain loop (create,
write, close, rename, two ``syncfs`` a batch) with values already framed: what is left above it
is the store's own Python.

    .venv/bin/python benchmarks/store_cas.py                          # on /tmp (the disk)
    .venv/bin/python benchmarks/store_cas.py --parent /dev/shm        # tmpfs: no disk in it

User and system CPU are reported apart: on a VM disk the system part moves by 10x between
minutes (journal commits, and TRIMs after large removals on a disk mounted with ``discard``),
so compare the ratio of runs made together, and prefer tmpfs for the store's own cost.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from baml_studio.format.cas import encode_cas_object
from baml_studio.format.ids import value_cid
from baml_studio.store import StreamStore
from baml_studio.store.fsops import OsFileSystem

BODY_BYTES = 300


def values(batches: int, per_batch: int, seed: int) -> list[list[tuple[int, bytes]]]:
    """Distinct codec-1 values of ``BODY_BYTES`` (none deduplicated)."""
    out = []
    k = seed * batches * per_batch
    for _ in range(batches):
        batch = []
        for _ in range(per_batch):
            k += 1
            batch.append((1, k.to_bytes(8, "big") * (BODY_BYTES // 8)))
        out.append(batch)
    return out


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def run_store(root: Path, data: list[list[tuple[int, bytes]]]) -> tuple[float, float]:
    """(user, system) CPU seconds of ``publish_cas_batch`` over ``data``."""
    user = system = 0.0
    with StreamStore.open(root, os.urandom(16)) as store:
        for batch in data:
            u0, s0 = _cpu()
            store.publish_cas_batch(batch)
            u1, s1 = _cpu()
            user, system = user + u1 - u0, system + s1 - s0
    return user, system


def run_bare(root: Path, data: list[list[tuple[int, bytes]]]) -> tuple[float, float]:
    """The same files with the same system calls from a plain loop (framing done before)."""
    fs = OsFileSystem()
    (root / "tmp").mkdir(parents=True)
    framed = [
        [(value_cid(c, b).hex(), encode_cas_object(c, b)) for c, b in batch] for batch in data
    ]
    for prefix in {name[:2] for batch in framed for name, _ in batch}:
        (root / "cas" / "sha256" / prefix).mkdir(parents=True, exist_ok=True)
    top = os.fspath(root)
    user = system = 0.0
    for n, batch in enumerate(framed):
        u0, s0 = _cpu()
        staged = []
        for i, (name, raw) in enumerate(batch):
            tmp = f"{top}/tmp/{n:08x}{i:08x}.pending"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            os.write(fd, raw)
            os.close(fd)
            staged.append((tmp, f"{top}/cas/sha256/{name[:2]}/{name}.bamlvalue"))
        fs.sync_filesystem(top)
        for tmp, final in staged:
            os.rename(tmp, final)
        fs.sync_filesystem(top)
        u1, s1 = _cpu()
        user, system = user + u1 - u0, system + s1 - s0
    return user, system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parent", type=Path, default=Path("/tmp"), help="where the stores go")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--per-batch", type=int, default=500, help="values a group commit")
    parser.add_argument("--reps", type=int, default=5, help="alternating repetitions (median)")
    args = parser.parse_args()
    n = args.batches * args.per_batch
    runners: dict[str, Callable[[Path, list[list[tuple[int, bytes]]]], tuple[float, float]]] = {
        "bare file operations (baseline)": run_bare,
        "StreamStore.publish_cas_batch": run_store,
    }
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
    print(
        f"{n} values of {BODY_BYTES} bytes a repetition, {args.per_batch} a group commit, "
        f"under {args.parent}; {args.reps} alternating repetitions, medians"
    )
    for rep in range(args.reps):
        for k, (name, run) in enumerate(runners.items()):
            parent = Path(tempfile.mkdtemp(prefix="store-cas-", dir=args.parent))
            try:
                user, system = run(
                    parent / "profiles-v1", values(args.batches, args.per_batch, 2 * rep + k)
                )
            finally:
                shutil.rmtree(parent, ignore_errors=True)
                os.sync()  # the removal's own cost stays out of the next repetition
            figures[name].append((user / n * 1e6, system / n * 1e6))
            time.sleep(0.2)
    print(f"{'':34}{'user µs':>10}{'system µs':>11}{'all µs':>9}   a value, CPU")
    medians = {}
    for name, rows in figures.items():
        user = statistics.median(u for u, _ in rows)
        system = statistics.median(s for _, s in rows)
        every = statistics.median(u + s for u, s in rows)
        medians[name] = (user, every)
        print(f"{name:34}{user:10.1f}{system:11.1f}{every:9.1f}")
    (bare_user, bare_all), (store_user, store_all) = medians.values()
    ratios = f"user CPU {store_user / bare_user:.2f}, all CPU {store_all / bare_all:.2f}"
    print(f"store / baseline: {ratios}")


if __name__ == "__main__":
    main()
