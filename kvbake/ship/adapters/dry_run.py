"""`deploy --dry-run`: every node's launcher run with `--print` and the variables a deploy passes; nothing changes."""

# No engine is touched: no lock, journal, tag, pull or record. The rank files the variables name are written to a
# temporary folder, removed afterwards. The launcher runs with DOCKER_HOST pointing at no engine (a socket path in
# that folder that nothing listens on), so a launcher that ignores --print cannot change a node: it fails, and the
# dry run says the launcher does not support --print. The report shows the node's own DOCKER_HOST.

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvbake.deployfile import Deployment
from kvbake.errors import RolloutError
from kvbake.serve.core.runtime_config import ENV_FILE, settings_of_release
from kvbake.ship.adapters.transitions import write_rank_files
from kvbake.ship.core.launcher_variables import launcher_variables
from kvbake.ship.core.release import Release

PRINT_FLAG = "--print"
NO_ENGINE_SOCKET = "no-engine.sock"


@dataclass(frozen=True)
class NodeDryRun:
    """What a deploy would run on one node: the launcher's command line, its variables, the switches file's lines and
    the engine calls the launcher printed."""

    node: str
    role: str
    command: tuple[str, ...]
    variables: dict[str, str]
    ranks_env: tuple[str, ...]
    calls: tuple[str, ...]


def start_order(deployment: Deployment) -> list[str]:
    return [name for group in deployment.start_groups() for name in group]


def printed_calls(deployment: Deployment, name: str, variables: dict[str, str], folder: Path) -> tuple[str, ...]:
    """Run the node's launcher with --print; its stdout lines. A launcher that exits non-zero is refused by name."""
    launcher = deployment.launcher
    command = [*launcher.command, PRINT_FLAG]
    env = {**os.environ, **variables, "DOCKER_HOST": f"unix://{folder / NO_ENGINE_SOCKET}"}
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=launcher.timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RolloutError(f"dry run: launcher on {name} did not run ({type(err).__name__}: {err})",
                           "check launcher.command in the deployment file; nothing was changed") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RolloutError(f"dry run: launcher on {name} exited {done.returncode} with {PRINT_FLAG} ({last}): it refused an input "
                           f"or does not support {PRINT_FLAG}",
                           f"fix the input it names, or give the launcher a {PRINT_FLAG} that prints its engine calls and touches "
                           "no engine (docs/launcher.md); nothing was changed")
    return tuple(line for line in done.stdout.splitlines() if line.strip())


def dry_run(deployment: Deployment, repository: str, release: Release) -> list[NodeDryRun]:
    """Every node, in start order, as a deploy of `release` would launch it."""
    settings = settings_of_release(release)
    reports = []
    with tempfile.TemporaryDirectory(prefix="kvbake-dry-run-") as temporary:
        folder = Path(temporary)
        for name in start_order(deployment):
            files = write_rank_files(folder / name, settings)
            variables = launcher_variables(deployment, repository, name, release, settings, files)
            node = next(n for n in deployment.nodes if n.name == name)
            reports.append(NodeDryRun(name, node.role, deployment.launcher.command, variables,
                                      tuple(settings.env_text().splitlines()[1:]), printed_calls(deployment, name, variables, folder)))
    return reports


def report_text(release: Release, reports: list[NodeDryRun]) -> str:
    lines = [f"dry run: deploy of release {release.id} ({release.preset}, max-model-len {release.max_model_len}), "
             f"image {release.image}; nothing was changed"]
    for r in reports:
        lines.append(f"{r.node} ({r.role}, rank {r.variables['KVBAKE_NODE_RANK']}): {' '.join(r.command)} {PRINT_FLAG}")
        lines.append("  variables:")
        lines += [f"    {name}={value}" for name, value in sorted(r.variables.items())]
        lines.append(f"  {ENV_FILE} (switches):")
        lines += [f"    {line}" for line in r.ranks_env] or ["    (none)"]
        lines.append("  engine calls:")
        lines += [f"    {call}" for call in r.calls] or ["    (the launcher printed none)"]
    return "\n".join(lines)


def report_data(release: Release, reports: list[NodeDryRun]) -> dict:
    return {"dry_run": True, "release": release.id, "image": release.image, "preset": release.preset,
            "nodes": [{"node": r.node, "role": r.role, "command": [*r.command, PRINT_FLAG], "variables": r.variables,
                       "ranks_env": list(r.ranks_env), "calls": list(r.calls)} for r in reports]}
