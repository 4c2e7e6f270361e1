"""bench/line_rate.py's probe, imported by every Python process started with this folder on
PYTHONPATH and LINE_RATE_PROBE set: in a nodeagent, it notes when each step of the simulated
engine hands out its tokens (the moment a token exists), so the bench can measure the delay
from there to the user's SSE read. It patches the engine from outside so that a checkout
that never heard of it (a side-by-side baseline) is measured the same way.

Each step is one line of `<time.monotonic()> <request id>=<tokens so far> ...` in
<LINE_RATE_PROBE>/<pid>.steps, written at once: the platform is stopped with SIGTERM."""

from __future__ import annotations

import os
import sys
import time


def _install(folder: str) -> None:
    from nodeagent import sim

    out = open(os.path.join(folder, f"{os.getpid()}.steps"), "w", buffering=1)
    original = sim.SimEngine._deliver

    def deliver(self: sim.SimEngine, result: object) -> None:
        original(self, result)
        now = time.monotonic()
        streams = self._streams
        parts = []
        for request_id in (*result.started, *result.decoded):  # type: ignore[attr-defined]
            stream = streams.get(request_id)
            if stream is not None:
                parts.append(f"{request_id}={stream.emitted}")
        if parts:
            out.write(f"{now:.6f} {' '.join(parts)}\n")

    sim.SimEngine._deliver = deliver  # type: ignore[method-assign]


if os.environ.get("LINE_RATE_PROBE") and "nodeagent.main" in sys.orig_argv:
    _install(os.environ["LINE_RATE_PROBE"])
