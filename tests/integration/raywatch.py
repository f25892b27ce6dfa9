"""A watch on a real Ray cluster's GCS from outside its nodes (gcs_watch.py in a container of the Ray stand-in base on the
host network), and what its polls prove about a gang restart: every old Ray node gone before the first new one runs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from kvbake.engines.adapters.client import Engine
from kvbake.rig.serve_shapes import RAY_BASE, RAY_NO_EGRESS

WATCH = Path(__file__).resolve().with_name("gcs_watch.py")


def alive(poll: dict) -> set[str]:
    """The nodes the GCS lists as alive in one poll."""
    return {node for node, info in (poll.get("nodes") or {}).items() if info["alive"]}


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


def stop_order_failures(old: dict, new: dict, polls: list[dict]) -> list[str]:
    """Against Ray's own view: no node joined the old cluster, no old Ray node (its raylet) still answered while the new
    cluster listed a node, no old node registered with the new cluster, and the new one formed of two new nodes alone."""
    old_nodes, failures = alive(old), []
    for poll in polls:
        cluster = poll.get("cluster")
        if cluster == old["cluster"] and set(poll["nodes"]) - old_nodes:
            failures.append(f"node(s) {sorted(set(poll['nodes']) - old_nodes)} joined the old cluster {cluster[:12]}")
        elif cluster not in (None, old["cluster"]):
            still = old_nodes & set(poll["raylets_up"])
            if still and poll["nodes"]:
                failures.append(f"old Ray node(s) {sorted(still)} answered while the new cluster {cluster[:12]} listed {sorted(poll['nodes'])}")
            if old_nodes & set(poll["nodes"]):
                failures.append(f"old node(s) {sorted(old_nodes & set(poll['nodes']))} registered with the new cluster {cluster[:12]}")
    if set(new["nodes"]) != alive(new) or len(alive(new)) != 2:
        failures.append(f"the new cluster's node table is not two alive nodes: {new['nodes']}")
    return failures
