"""The names kvbake accepts for nodes and containers: the deployment file's node rule, Docker's container rule, launchers' trapped names."""

from __future__ import annotations

import re

from kvbake.errors import UsageError

# The same patterns as the deployment file's schema (kvbake/schema/deploy.schema.json); a unit test holds them equal.
NODE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
CONTAINER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")  # Docker's rule for a container name


def check_node_name(name: str, option: str) -> str:
    """A node name goes into container labels, files and audit lines: lower-case letters, digits, `.`, `_`, `-`."""
    if not NODE_NAME.match(name):
        raise UsageError(f"{option} names the node {name!r}, which is not a node name",
                         "name a node with lower-case letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)")
    return name


def check_container_name(name: str, option: str) -> str:
    """A container name as Docker accepts it."""
    if not CONTAINER_NAME.match(name):
        raise UsageError(f"{option} names the container {name!r}, which Docker does not accept as a container name",
                         "give the container's name as docker ps shows it ([a-zA-Z0-9][a-zA-Z0-9_.-]+)")
    return name


# Names a launcher's exit trap stops (and removes) by name: run_cluster.sh's node-<n> (the trap's `docker stop` and
# `docker rm` of its CONTAINER_NAME) and eugr's launch-cluster.sh default vllm_node (its cleanup stops the cluster).
TRAPPED_NAMES = ((re.compile(r"node-[0-9]+"), "vLLM's run_cluster.sh stops and removes its node-<n> on exit"),
                 (re.compile(r"vllm_node"), "eugr's launch-cluster.sh stops its vllm_node when its command ends"))


def trapped_name(name: str) -> str | None:
    """Which launcher's exit trap stops a container of this name, or None."""
    return next((why for pattern, why in TRAPPED_NAMES if pattern.fullmatch(name)), None)
