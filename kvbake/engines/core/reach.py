"""What to do when an engine does not answer: the fix for its kind of host (the machine's service, or ssh to a node)."""

from __future__ import annotations

import shlex
from urllib.parse import urlsplit

LOCAL_FIX = "start the Docker service of that machine (kvbake never starts an engine), or check DOCKER_HOST and --host"
SSH_STDERR = "stderr="  # where the docker CLI quotes ssh's own reason when `ssh … docker system dial-stdio` fails


def ssh_command(host: str) -> str:
    """The ssh command line that reaches an `ssh://[user@]node[:port]` engine's CLI, as the docker CLI runs it."""
    parts = urlsplit(host)
    port = ["-p", str(parts.port)] if parts.port else []
    user = f"{parts.username}@" if parts.username else ""
    return shlex.join(["ssh", *port, f"{user}{parts.hostname or ''}", "docker", "version"])


def unreachable_fix(host: str | None) -> str:
    """How to make the engine at `host` answer: for an ssh host, the ssh check to run from this host."""
    if host and host.startswith("ssh://"):
        return (f"check that `{ssh_command(host)}` answers from this host (the node is up, its sshd and your key accept "
                "you, the user may run docker), and that deploy.yaml names the node's right address")
    return LOCAL_FIX


def unreachable_reason(host: str | None, reason: str) -> str:
    """The docker CLI's reason, cut to ssh's own words for an ssh host (the CLI wraps them in a long sentence)."""
    if host and host.startswith("ssh://") and SSH_STDERR in reason:
        return reason.rsplit(SSH_STDERR, 1)[1].strip() or reason
    return reason


def node_reach_fix(host: str) -> str:
    """How to bring a node of the deployment file back: its ssh check for an ssh host, else its engine or its host line."""
    if host.startswith("ssh://"):
        return unreachable_fix(host)
    return "bring the node's engine back, or fix its host in the deployment file"
