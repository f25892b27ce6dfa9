"""A watch on a real Ray cluster's GCS from outside its nodes (gcs_watch.py in a container of the Ray stand-in base on the
host network), polled around a gang restart (kvbake_rig.gcs_polls judges the polls)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from kvbake.engines.adapters.client import Engine
from kvbake_rig.gcs_polls import alive
from kvbake_rig.serve_shapes import RAY_BASE, RAY_NO_EGRESS

WATCH = Path(__file__).resolve().with_name("gcs_watch.py")


class GcsWatch:
    """gcs_watch.py polling the GCS at `address` while the block runs, on `engine` (not a node's: the nodes' own
    containers are what the walk compares)."""

    def __init__(self, engine: Engine, address: str) -> None:
        self.engine, self.address, self.container = engine, address, None

    def __enter__(self) -> "GcsWatch":
        self.container = self.engine.client.run(
            RAY_BASE, ["python3", "/watch/gcs_watch.py", self.address], name=f"kvbake-gcs-watch-{os.getpid()}", detach=True,
            networks=["host"], envs=RAY_NO_EGRESS, mounts=[["type=bind", f"source={WATCH}", "target=/watch/gcs_watch.py", "readonly"]])
        return self

    def __exit__(self, *exc) -> None:
        self.engine.client.container.remove(self.container, force=True)

    def polls(self) -> list[dict]:
        lines = str(self.engine.client.container.logs(self.container)).splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def wait_for(self, wanted: Callable[[dict], bool], since: int = 0, timeout_s: float = 120) -> dict:
        """The first poll from index `since` on that is `wanted` (the test fails when none comes in time)."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = next((poll for poll in self.polls()[since:] if wanted(poll)), None)
            if found is not None:
                return found
            assert time.monotonic() < deadline, f"the GCS at {self.address} never showed it; last polls: {self.polls()[-3:]}"
            time.sleep(0.5)

    def gang_restart(self, step: Callable[[], object]) -> tuple[dict, dict, list[dict]]:
        """Run `step` (a deploy or rollback) over a formed two-node cluster; the last poll of that cluster, the first
        poll that lists a new cluster of two alive nodes, and every poll in between."""
        since = len(self.polls())
        old = self.wait_for(lambda poll: len(alive(poll)) == 2, since=max(since - 1, 0))
        since = len(self.polls())
        step()
        new = self.wait_for(lambda poll: poll.get("cluster") not in (None, old["cluster"]) and len(alive(poll)) == 2, since=since)
        polls = self.polls()
        return old, new, polls[polls.index(old):polls.index(new) + 1]
