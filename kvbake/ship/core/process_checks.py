"""Pure checks of the processes a rank serves with: their switch set, code overrides, length, imports and file changes."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Mapping, Sequence

from kvbake.engines.core.procfs import ImportOrigin
from kvbake.serve.core.serve_description import CODE_OVERRIDES
from kvbake.serve.core.serve_reading import ServeReading, second_serves
from kvbake.serve.core.vllm_argv import PER_NODE_OPTIONS, ServeArgs, parse_serve_args

MODEL_OPTION = "--model"


@dataclass(frozen=True)
class ProcessExpectation:
    """What every serving process of a rank must show: the exact switch set among `names`, the image's own values of
    the code-selecting variables, the length (0: not checked), the preset's arguments, and `vllm` imported from the
    source root. An adopted serve keeps its own overrides and imports (`baked` False): they are what it always ran."""

    switches: Mapping[str, str]
    names: tuple[str, ...]
    image_env: tuple[str, ...]
    max_model_len: int
    launcher_args: tuple[str, ...]
    source_root: str
    baked: bool = True


def switch_set(env: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name in names}


# vLLM's Ray executor hands every Ray worker the driver's own values of vLLM's variables, in-process, before the
# model loads (vllm/executor/ray_distributed_executor.py: `update_environment_variables` with the names that
# `get_env_vars_to_copy` of vllm/ray/ray_env.py gives, vLLM's VLLM_* variables); every other variable, and a VLLM_* one
# the head leaves unset, is what the worker's Ray node gave the actor.
HANDED_PREFIX = "VLLM_"


def handed_switches(head_env: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """The switches the head's vLLM serve hands its Ray workers: those among its own named VLLM_*."""
    return {name: value for name, value in switch_set(head_env, names).items() if name.startswith(HANDED_PREFIX)}


def ray_worker_switches(ray_env: Mapping[str, str], handed: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """A Ray worker rank's own switch set: its Ray node's, overlaid with those the head hands it."""
    return {**switch_set(ray_env, names), **handed}


def process_failures(node: str, reading: ServeReading, origins: Sequence[ImportOrigin], expected: ProcessExpectation) -> list[str]:
    """Every way the vLLM serves of one rank differ from what the release says they run; none serving is one failure."""
    if not reading.serving:
        main = " ".join(reading.main.argv) if reading.main else "nothing"
        return [f"{node}: no vLLM serve runs in the serving container (its main process is {main[:80]})"]
    two = second_serves(reading)
    failures = [f"{node}: {two}; a GPU node serves one model"] if two else []
    own = dict(item.partition("=")[::2] for item in expected.image_env)
    for serving, origin in zip(reading.serving, origins):
        where = f"{node}: pid {serving.process.pid}"
        found = switch_set(serving.process.env, expected.names)
        for name in sorted(set(found) | set(expected.switches)):
            if found.get(name) != expected.switches.get(name):
                failures.append(f"{where}: switch {name} is {found.get(name, 'unset')}, expected {expected.switches.get(name, 'unset')}")
        failures += argument_failures(where, serving.serve.args, expected)
        if expected.baked:
            failures += [f"{where}: {name}={value!r} in its environment, not as the image sets it ({own.get(name, 'unset')!r})"
                         for name, value in sorted(serving.process.env.items()) if name in CODE_OVERRIDES and own.get(name) != value]
            failures += origin_failures(where, serving.process.cwd, origin, expected.source_root)
    return failures


def argument_failures(where: str, args: ServeArgs, expected: ProcessExpectation) -> list[str]:
    """The serve's --max-model-len is the release's, and every argument of the preset is among the serve's."""
    failures = []
    length = args.value("--max-model-len")
    if expected.max_model_len and length != str(expected.max_model_len):
        failures.append(f"{where}: --max-model-len is {length or 'unset'} in its command line, not {expected.max_model_len}")
    if expected.launcher_args:
        wanted = parse_serve_args(["placeholder-model", *expected.launcher_args]).entries
        missing = [entry for entry in wanted if entry not in args.entries]
        failures += [f"{where}: the preset's {' '.join([entry[0], *entry[1]])} is not in its command line" for entry in missing]
    return failures


def expected_origin(source_root: str) -> str:
    return posixpath.join(source_root.rstrip("/"), "vllm", "__init__.py")


def origin_failures(where: str, cwd: str, origin: ImportOrigin, source_root: str) -> list[str]:
    """`import vllm` must resolve to the baked package under the source root for this very process."""
    baked = expected_origin(source_root)
    if origin.error is not None:
        return [f"{where}: where it imports vllm from could not be read ({origin.error})"]
    if origin.origin == baked:
        return []
    shadow = next((entry for entry in origin.path if origin.origin and origin.origin.startswith(entry.rstrip("/") + "/")), None)
    reason = f" (sys.path entry {shadow}; its working directory is {cwd})" if shadow else ""
    return [f"{where}: imports vllm from {origin.origin or 'nowhere'}, not the baked {baked}{reason}"]


def change_failures(node: str, changes: Mapping[str, str], source_root: str) -> list[str]:
    """A file of the running container's writable layer under the source root (a runtime mod, a hand edit, a deletion)
    means it no longer runs the image; parent folders and bytecode Python writes itself do not count."""
    return [f"{node}: {path} was {KINDS.get(kind, kind)} in the running container" for path, kind in changed_files(changes, source_root)]


def changes_since_adopt(node: str, changes: Mapping[str, str], source_root: str, recorded: Sequence[str]) -> list[str]:
    """The adopted serve's writable layer against what `adopt` recorded: a file under the source root changed, added or
    deleted since (a `docker cp` of another mod) means it no longer runs what was adopted; bytecode Python writes for a
    source adopt recorded does not count."""
    unrecorded = {path: kind for path, kind in changes.items() if path not in recorded}
    return [f"{node}: {path} was {KINDS.get(kind, kind)} in the adopted serve's container after adopt (adopt recorded "
            f"{len(recorded)} changed file(s) there)" for path, kind in changed_files(changes, source_root)
            if path in unrecorded and not written_bytecode(path, unrecorded)]


def edits_since_adopt(node: str, recorded: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """The files adopt found changed in the adopted serve's writable layer, by content: one edited again since (another
    mod copied over it) or gone means it no longer runs what was adopted."""
    return [f"{node}: {path} was {'edited' if path in now else 'deleted'} in the adopted serve's container after adopt "
            f"({f'sha256 {now[path][:12]}, ' if path in now else ''}adopt recorded sha256 {digest[:12]})"
            for path, digest in sorted(recorded.items()) if now.get(path) != digest]


KINDS = {"A": "added", "C": "changed", "D": "deleted"}


def changed_files(changes: Mapping[str, str], source_root: str) -> list[tuple[str, str]]:
    """The changed paths under the source root that are not just the folders holding another change, nor `.pyc` files
    Python wrote into `__pycache__` for a source that is itself unchanged."""
    root = source_root.rstrip("/") + "/"
    under = {path: kind for path, kind in changes.items() if path.startswith(root)}
    parents = {posixpath.dirname(path) for path in under}
    files = []
    for path, kind in sorted(under.items()):
        if path in parents and kind == "C":
            continue
        if kind == "A" and written_bytecode(path, under):
            continue
        files.append((path, kind))
    return files


def written_bytecode(path: str, changes: Mapping[str, str]) -> bool:
    """`pkg/__pycache__/mod.cpython-311.pyc` (or the folder itself) added while `pkg/mod.py` is unchanged."""
    folder, name = posixpath.split(path)
    if name == "__pycache__":
        return True
    if posixpath.basename(folder) != "__pycache__" or not name.endswith(".pyc"):
        return False
    source = posixpath.join(posixpath.dirname(folder), name.split(".", 1)[0] + ".py")
    return source not in changes


def process_signature(reading: ServeReading, names: Sequence[str]) -> tuple:
    """What every rank must share, process by process: the switch set and the serve's arguments less those that differ
    per rank (and less how the model is named: a positional or --model)."""
    signature = []
    for serving in reading.serving:
        args = serving.serve.args.without((*PER_NODE_OPTIONS, MODEL_OPTION))
        signature.append((tuple(sorted(switch_set(serving.process.env, names).items())), serving.serve.model, args.entries))
    return tuple(sorted(signature))


def ray_worker_failures(node: str, reading: ServeReading, switches: Mapping[str, str] | None = None, names: Sequence[str] = (),
                        handed: Mapping[str, str] | None = None) -> list[str]:
    """A Ray worker rank runs its Ray node and no vLLM serve of its own (vLLM's workers there are Ray actors). Given
    the release's switch set, the Ray node's environment (which its actors inherit), overlaid with the switches the
    head hands its workers (`handed`), must hold exactly that set."""
    if reading.ray is None:
        main = " ".join(reading.main.argv)[:80] if reading.main else "nothing"
        return [f"{node}: the Ray worker rank runs no Ray node (its main process is {main}, and no raylet runs beside it)"]
    if switches is None:
        return []
    found = ray_worker_switches(reading.ray.env, handed or {}, names)
    differing = sorted(name for name in {*found, *switches} if found.get(name) != switches.get(name))
    return [f"{node}: the Ray node runs {name}={found.get(name, '(unset)')}, the release sets {switches.get(name, '(unset)')}"
            for name in differing]
