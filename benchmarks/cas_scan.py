"""CPU of the publisher's CAS scan on each flush, against listing every shard directory.

Shipped values stay in the store for the gateway's retention period (an hour by default), so
a long-running process keeps tens or hundreds of thousands of CAS files while only the few
written since the last flush are new. Each scan (``collect_cas._scan_unshipped``) skips the
shard directories whose every file was shipped when last listed and which have not changed
since; the baseline, in the same run and on the same files, is the same scan with those marks
forgotten first (every directory listed, as every scan did before). Rounds are ``--interval``
seconds apart: ``--rate`` new values a second arrive spread over the shards, each round scans
both ways, then marks the new values shipped.

    .venv/bin/python benchmarks/cas_scan.py                              # 45,000 files on /tmp
    .venv/bin/python benchmarks/cas_scan.py --files 200000 --rates 1,10,100,1000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from baml_studio.publisher.collect_cas import _scan_unshipped
from baml_studio.publisher.state import PublishState
from baml_studio.store.layout import StoreLayout


def _put(layout: StoreLayout, n: int) -> bytes:
    cid = hashlib.sha256(n.to_bytes(8, "big")).digest()
    path = layout.cas_path(cid)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"v" * 64)
    return cid


def _scan_cpu(state: PublishState, *, forget: bool) -> tuple[float, int]:
    """CPU seconds of one scan and the files it found; ``forget``: the baseline (marks
    forgotten first, and put back afterwards so the next cached scan is not disturbed)."""
    cache = state.cas_scan
    kept = dict(cache.marks), cache.ledger_losses, cache.full_at
    if forget:
        cache.marks.clear()
    started = time.process_time()
    found = sum(1 for _ in _scan_unshipped(state))
    spent = time.process_time() - started
    if forget:
        cache.marks.clear()
        cache.marks.update(kept[0])
        cache.ledger_losses, cache.full_at = kept[1], kept[2]
    return spent, found


def run(parent: Path, files: int, rate: float, interval: float, rounds: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="cas-scan-", dir=parent))
    try:
        root = tmp / ".baml" / "profiles-v1"
        layout = StoreLayout(root)
        old = [_put(layout, n) for n in range(files)]
        state = PublishState(root)
        state.mark_shipped(old)
        past = time.time_ns() - 3_600_000_000_000
        for shard in layout.cas_dir.iterdir():
            os.utime(shard, ns=(past, past))  # written an hour ago
        _scan_cpu(state, forget=False)  # the first scan after the ledger's load marks nothing
        cached: list[float] = []
        full: list[float] = []
        n, owed = files, 0.0
        for round_ in range(rounds):
            owed += rate * interval
            new = []
            while owed >= 1:
                new.append(_put(layout, n))
                n, owed = n + 1, owed - 1
            first, second = (True, False) if round_ % 2 else (False, True)
            for forget in (first, second):
                spent, found = _scan_cpu(state, forget=forget)
                assert found == len(new), (found, len(new))
                (full if forget else cached).append(spent)
            state.mark_shipped(new)
            time.sleep(interval)
        warm = rounds // 4  # the first rounds still list directories marked by none yet
        return {
            "cached_ms": statistics.median(cached[warm:]) * 1e3,
            "full_ms": statistics.median(full[warm:]) * 1e3,
            "marked": len(state.cas_scan.marks),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.sync()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", type=int, default=45_000, help="shipped CAS files kept")
    parser.add_argument("--rates", default="1,10,100", help="new values a second, comma list")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between rounds")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--parent", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    last = args.rounds - args.rounds // 4
    print(f"{args.files} shipped CAS files under {args.parent}, a scan every {args.interval} s, "
          f"{args.rounds} rounds a rate (medians of the last {last})")  # fmt: skip
    print(f"{'new values/s':>12} {'scan ms':>9} {'every dir listed ms':>20} {'ratio':>7} "
          f"{'dirs marked':>12}")  # fmt: skip
    for rate in (float(r) for r in args.rates.split(",")):
        result = run(args.parent, args.files, rate, args.interval, args.rounds)
        ratio = result["cached_ms"] / result["full_ms"]
        print(f"{rate:>12g} {result['cached_ms']:>9.2f} {result['full_ms']:>20.2f} "
              f"{ratio:>7.3f} {result['marked']:>12.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
