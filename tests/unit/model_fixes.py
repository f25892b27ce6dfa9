"""The fixes kvbake prints, read as the model's commands: every refusal's fix is run, and must work or name one that does."""

from __future__ import annotations

import re
import shutil

from kvbake.errors import KvbakeError
from kvbake.ship.adapters import rollout

import model_commands as commands
from fake_fleet import BASE, CONTROL
from model_world import BASE_NAME, HOSTS, NODES, STALE, World, acting_on

# `python build.py COMMAND [--option [VALUE]]...`, or a bare `deploy --…`/`adopt --…` as a journal's refusal names it, or
# `deploy again`.
PRINTED = re.compile(r"(?:python build\.py (?P<full>deploy|adopt|rollback|base sync)|\b(?P<bare>deploy|adopt)(?= --| again\b))"
                     r"(?P<options>(?: --[a-z-]+(?: (?!--|to\b|or\b|and\b|with\b|from\b|once\b|first\b|again\b)[^\s;,()]+)?)*)")
VALUED = {"--preset", "--reseat", "--to", "--deploy", "--image", "--reason"}
HOPS = 3  # a fix that names another fix is followed this far


def printed_fixes(text: str) -> list[tuple[str, dict[str, str | None]]]:
    """Each command a fix names: its command word and its options (a value for the options that take one)."""
    found = []
    for match in PRINTED.finditer(text):
        words, options = (match.group("options") or "").split(), {}
        while words:
            option = words.pop(0)
            options[option] = words.pop(0) if option in VALUED and words and not words[0].startswith("--") else None
        found.append((match.group("full") or match.group("bare"), options))
    return found


def as_command(command: str, options: dict[str, str | None]) -> commands.Command | None:
    """The model's command for a printed one, run with --break-lock as the docs say for a stale lock (None: read-only)."""
    if command in ("deploy", "adopt") and ("--resume" in options or "--revert" in options):
        return commands.recover("resume" if "--resume" in options else "revert", command, True)
    if command == "deploy" and "--reset-tags" in options:
        return commands.reset_tags(True)
    if command == "deploy":
        reseat = options.get("--reseat")
        nodes = frozenset(NODES) if reseat in (None, "NODE") else frozenset({reseat})
        if "--reseat" in options:
            return lambda fleet: rollout.deploy(fleet, CONTROL, BASE_NAME, BASE, True, reseat=nodes)
        return commands.deploy("control", True)
    if command == "adopt":
        return commands.release_adoption(True) if "--release" in options else commands.adopt(True)
    if command == "rollback":
        return commands.rollback_to_adopted(True) if options.get("--to") == "adopted" else commands.rollback(True)
    if command == "base sync":
        return commands.base_sync("--force" in options)
    return None


def fix_failures(world: World, host: str, refusal: KvbakeError) -> list[str]:
    """On a copy of the world with every node back and every lock stale: run each command the refusal's fix names, from
    the host that was refused; each must succeed, or be refused with a fix that names a command, followed the same way up
    to HOPS times. A fix that names no command (wait, retry, check a file) is advice, and is not run."""
    problems = []
    for command, options in printed_fixes(refusal.fix):
        twin = world.copy()
        try:
            with acting_on(twin):
                problems += follow(twin, host, command, options, [f"{type(refusal).__name__}: {refusal.one_line()}"])
        finally:
            shutil.rmtree(twin.folder, ignore_errors=True)
    return problems


def follow(twin: World, host: str, command: str, options: dict[str, str | None], trail: list[str]) -> list[str]:
    model_command = as_command(command, options)
    if model_command is None:
        return []
    for fake in twin.fakes.values():
        fake.down, fake.clock = False, fake.clock + STALE + 1
    outcome = twin.run(host, model_command)
    step = f"{command} {' '.join(k if v is None else f'{k} {v}' for k, v in options.items())}".strip()
    if not isinstance(outcome, KvbakeError):
        return []
    trail = [*trail, f"{step} -> {outcome.one_line()}"]
    named = printed_fixes(outcome.fix)
    if len(trail) > HOPS or not named:
        return [] if not named and advice_only(outcome.fix) else [" => ".join(trail)]
    return follow(twin, host, *named[0], trail)


def advice_only(fix: str) -> bool:
    """A fix that names no command but says what to do: wait, retry, check, nothing to do, bring a node back, …"""
    return bool(fix.strip()) and bool(re.search(r"\b(wait|retry|check|nothing to do|bring|remove|adopt it|there is nothing|"
                                                r"deploy the release|deploy a kvbake release|roll every node|deploy or roll back)\b", fix))


__all__ = ["HOSTS", "fix_failures", "printed_fixes"]
