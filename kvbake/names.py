"""The names kvbake accepts for nodes and containers: the deployment file's node rule and Docker's own container rule."""

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
