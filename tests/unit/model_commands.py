"""The operator commands of the rollout model, each a function of the fleet of the host that runs it (as the CLI calls them)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable

from kvbake.ship.adapters import adoption, basesync, rollout, status as status_module, tag_reset
from kvbake.ship.adapters.fleet import Fleet

from fake_fleet import BASE, CONTROL, OTHER, PACKING
from model_world import BASE_NAME

Command = Callable[[Fleet], object]
BY_PRESET = {r.preset: r for r in (CONTROL, PACKING, OTHER)}


def deploy(release: str | object, break_lock: bool = False) -> Command:
    """`deploy --preset NAME [--break-lock]` of CONTROL, PACKING or OTHER."""
    chosen = BY_PRESET[release] if isinstance(release, str) else release
    return lambda fleet: rollout.deploy(fleet, chosen, BASE_NAME, BASE, break_lock)


def rollback(break_lock: bool = False) -> Command:
    return lambda fleet: rollout.rollback(fleet, break_lock)


def rollback_to_adopted(break_lock: bool = False) -> Command:
    return lambda fleet: adoption.rollback_to_adopted(fleet, break_lock)


def adopt(break_lock: bool = False) -> Command:
    return lambda fleet: adoption.adopt(fleet, "seed serve", break_lock)


def release_adoption(break_lock: bool = False) -> Command:
    """`adopt --release`."""
    return lambda fleet: adoption.release_adoption(fleet, break_lock)


def recover(mode: str, command: str = "deploy", break_lock: bool = False) -> Command:
    """`deploy --resume`, `deploy --revert`, `adopt --resume` or `adopt --revert`; as the CLI does, a resume is refused
    first on a host that marked the deployment diverged."""
    def run(fleet: Fleet) -> object:
        if mode == "resume":
            rollout.refuse_if_diverged(fleet.deployment)
        return rollout.recover(fleet, mode, break_lock, command=command)

    return run


def reset_tags(break_lock: bool = False) -> Command:
    """`deploy --reset-tags [--break-lock]`."""
    return lambda fleet: tag_reset.reset_tags(fleet, break_lock)


def base_sync(force: bool = False) -> Command:
    """`base sync [--force]`: the registry already holds the locked base (its side is faked); every node is checked, then
    pulls it by digest and tags it where deploy looks."""
    manifest = SimpleNamespace(base=SimpleNamespace(node_name=BASE_NAME, image=BASE_NAME), output=SimpleNamespace(repository="reg:5000/kvbake/x"))
    lock = SimpleNamespace(base=SimpleNamespace(config_digest="sha256:base", diff_ids=BASE, config={}))
    return lambda fleet: basesync.sync_base(None, fleet.deployment, manifest, lock, None, force)


def status() -> Command:
    return status_module.status
