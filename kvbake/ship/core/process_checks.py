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


# What a Ray worker's vLLM runs with: its actor's environment, which its Ray node (`ray start`) gives it, plus what the
# head's vLLM hands it at start-up. vLLM 0.32 has two Ray executors, which hand over differently:
# - vllm/v1/executor/ray_executor.py (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0): the head's values of the names
#   `get_env_vars_to_copy` (vllm/ray/ray_env.py) gives, written over the worker's: every name vLLM registers in vllm/envs.py,
#   every variable with a prefix it carries (VLLM_, NCCL_, HF_ and the others below, plus those VLLM_RAY_EXTRA_ENV_VAR_
#   PREFIXES_TO_COPY adds), PYTHONHASHSEED and the names VLLM_RAY_EXTRA_ENV_VARS_TO_COPY adds;
# - vllm/v1/executor/ray_executor_v2.py (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=1, 0.32's default): every variable of the
#   head's (ray_env_utils.get_driver_env_vars), with `setdefault`: the worker's own value wins.
# Both leave out the per-worker names (WORKER_SPECIFIC_ENV_VARS of vllm/v1/executor/ray_utils.py) and those the operator
# lists in ray_non_carry_over_env_vars.json. The two agree where the Ray node leaves a switch unset and the head's is
# carried by its name, and where the head leaves it unset; elsewhere the switch a worker runs depends on the executor,
# and kvbake names that as a problem rather than guess (`worker_switch_problems`).
CARRIED_PREFIXES = ("VLLM_", "FLASH_ATTENTION_", "LMCACHE_", "NCCL_", "UCX_", "HF_", "HUGGING_FACE_")
CARRIED_NAMES = ("PYTHONHASHSEED",)
EXTRA_PREFIXES = "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"
EXTRA_NAMES = "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY"
WORKER_SPECIFIC = frozenset({"VLLM_HOST_IP", "VLLM_HOST_PORT", "VLLM_NIXL_SIDE_CHANNEL_HOST", "LOCAL_RANK",
                             "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"})


def listed(value: str | None) -> set[str]:
    return {item.strip() for item in (value or "").split(",") if item.strip()}


def carried_by_name(name: str, head_env: Mapping[str, str]) -> bool:
    """Whether the head's vLLM hands `name` to its Ray workers under either executor (when the worker leaves it unset)."""
    prefixes = (*CARRIED_PREFIXES, *sorted(listed(head_env.get(EXTRA_PREFIXES))))
    return name not in WORKER_SPECIFIC and (name.startswith(prefixes) or name in {*CARRIED_NAMES, *listed(head_env.get(EXTRA_NAMES))})


def handed_switches(head_env: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """The switches the head's vLLM serve hands its Ray workers whenever a worker's Ray node leaves them unset."""
    return {name: value for name, value in switch_set(head_env, names).items() if carried_by_name(name, head_env)}


def ray_worker_switches(ray_env: Mapping[str, str], handed: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """A Ray worker rank's own switch set: its Ray node's, with those the head hands it where the node sets none."""
    return dict(sorted({**handed, **switch_set(ray_env, names)}.items()))


def worker_switch_problems(ray_env: Mapping[str, str], head_env: Mapping[str, str], names: Sequence[str]) -> list[str]:
    """Each switch whose value on a Ray worker depends on which of vLLM's Ray executors the head runs, as one line."""
    node, problems = switch_set(ray_env, names), []
    for name, value in sorted(switch_set(head_env, names).items()):
        if name in WORKER_SPECIFIC:
            continue
        if name in node and node[name] != value:
            problems.append(f"the Ray node sets {name}={node[name]} and the head's serve {name}={value}: vLLM's Ray executor "
                            f"gives the worker the head's value, its V2 executor (vLLM 0.32's default) the node's")
        elif name not in node and not carried_by_name(name, head_env):
            problems.append(f"the head's serve sets {name}={value} and the Ray node leaves it unset: vLLM's V2 Ray executor "
                            f"hands it to the worker, its V1 executor only if vLLM registers the name")
    return problems


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
                        head_env: Mapping[str, str] | None = None) -> list[str]:
    """A Ray worker rank runs its Ray node and no vLLM serve of its own (vLLM's workers there are Ray actors). Given
    the release's switch set, the Ray node's environment (which its actors inherit), with the switches the head's serve
    (`head_env`) hands its workers where the node sets none, must hold exactly that set, and no switch may depend on
    which of vLLM's Ray executors runs."""
    if reading.ray is None:
        main = " ".join(reading.main.argv)[:80] if reading.main else "nothing"
        return [f"{node}: the Ray worker rank runs no Ray node (its main process is {main}, and no raylet runs beside it)"]
    if switches is None:
        return []
    head_env = head_env or {}
    found = ray_worker_switches(reading.ray.env, handed_switches(head_env, names), names)
    differing = sorted(name for name in {*found, *switches} if found.get(name) != switches.get(name))
    return [f"{node}: {problem}; set it alike on both" for problem in worker_switch_problems(reading.ray.env, head_env, names)] + [
        f"{node}: the Ray node runs {name}={found.get(name, '(unset)')}, the release sets {switches.get(name, '(unset)')}"
        for name in differing]
