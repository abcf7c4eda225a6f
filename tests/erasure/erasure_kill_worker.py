"""An erasure worker in its own process, killed with SIGKILL between two steps
(test_erasure_resume.py).

Usage: ``python erasure_kill_worker.py DATA_DIR CONTROL_URL DERIVED_DIR ERASURE_DIR STEP`` with
``BAML_WORKLOAD_TOKEN`` in the environment. It runs the unfinished erasures of
``ERASURE_DIR/erasures.sqlite`` over the data plane's bucket (DATA_DIR), the control plane at
CONTROL_URL and Lance under DERIVED_DIR, and SIGKILLs itself right after STEP is recorded.
Prints ``{"killing": erasure_id, "after": step}`` first; exits 3 if it finished instead.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from baml_studio.erasure.config import ErasureConfig
from baml_studio.erasure.manager import ErasureManager
from baml_studio.gateway.service import load_dataplane_config
from baml_studio.projector.lance_store import PrivateStore
from baml_studio.projector.service import ProjectorConfig, open_projector


def main() -> int:
    data, url, derived, erasures, kill_after = sys.argv[1:6]
    dataplane = load_dataplane_config(Path(data), host="127.0.0.1", port=8787)
    projector = open_projector(ProjectorConfig(dataplane, url, os.environ["BAML_WORKLOAD_TOKEN"]))
    private = PrivateStore(derived)

    def after_step(erasure_id: str, step: str) -> None:
        if step == kill_after:
            sys.stdout.write(json.dumps({"killing": erasure_id, "after": step}) + "\n")
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    manager = ErasureManager.open(
        Path(erasures),
        projector.store,
        projector.control,
        lambda scope: private,
        config=ErasureConfig(settle_s=0, retry_initial_s=0.01, retry_max_s=0.05),
        after_step=after_step,
        start=False,
    )
    manager.run_pending()
    return 3


if __name__ == "__main__":
    sys.exit(main())
