"""The repository of a node's reference (a registry port is no tag; the first `@` ends it), a lock holder that is alive
on this machine is asked about, never signalled, and a mount record that names no destination or type is read as a
bind mount over `/`."""

from __future__ import annotations

import subprocess

import pytest

from kvbake.ship.adapters.node_identity import repository_of
from kvbake.ship.adapters.node_locks import holder_gone
from kvbake.ship.core.running import workdir_failures
from message_words import says

from test_node_locks_mutants import claim_here

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(("reference", "repository"), [
    (f"127.0.0.1:5000/kvbake/x@{DIGEST}", "127.0.0.1:5000/kvbake/x"),
    (f"ghcr.io/x/y@{DIGEST}@{DIGEST}", "ghcr.io/x/y"),
    ("127.0.0.1:5000/kvbake/x:current", "127.0.0.1:5000/kvbake/x"),
    ("127.0.0.1:5000/kvbake/x", "127.0.0.1:5000/kvbake/x"),
    ("x", "x"),
])
def test_the_repository_of_a_reference(reference, repository):
    assert repository_of(reference) == repository


def test_a_live_holder_on_this_machine_is_not_gone_and_is_never_signalled():
    holder = subprocess.Popen(["sleep", "30"])
    try:
        assert holder_gone(claim_here(holder.pid)) is False
        with pytest.raises(subprocess.TimeoutExpired):
            holder.wait(timeout=0.5)  # still running: asked with signal 0, nothing sent
    finally:
        holder.kill()
        holder.wait()


def test_a_mount_record_without_destination_or_type_is_read_as_a_bind_mount_over_the_root():
    failures = workdir_failures({"Config": {"WorkingDir": "/srv"}, "Mounts": [{"Source": "/host/x"}]})
    assert len(failures) == 1 and says(failures[0], "a bind mount at / holds the working directory /srv")
