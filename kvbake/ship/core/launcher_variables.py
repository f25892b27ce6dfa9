"""The variables kvbake gives the operator's launcher for one node and one release (docs/launcher.md); pure."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path

from kvbake.deployfile import Deployment
from kvbake.serve.core.runtime_config import ARGS_FILE, ENV_FILE, RankSettings
from kvbake.ship.core.release import Release


def node_rank(deployment: Deployment, name: str) -> int:
    """The head is node rank 0; the workers follow in the deployment file's order."""
    ordered = sorted(deployment.nodes, key=lambda n: n.role != "head")
    return next(i for i, n in enumerate(ordered) if n.name == name)


def launcher_variables(deployment: Deployment, repository: str, name: str, release: Release, settings: RankSettings,
                       files: Mapping[str, Path]) -> dict[str, str]:
    """What the launcher is told. The arguments (max-model-len first) come three ways, each keeping every argument
    whole: the launcher.args file, shell-quoted (for `eval set -- "$KVBAKE_LAUNCHER_ARGS"`) and as a JSON array. The
    node's own settings (nodes[].launch) come as one JSON object."""
    node = next(n for n in deployment.nodes if n.name == name)
    head, drafter = deployment.head(), deployment.drafter
    return {**deployment.launcher.env,
            "DOCKER_HOST": node.host, "KVBAKE_NODE": name, "KVBAKE_ROLE": node.role, "KVBAKE_IMAGE": f"{repository}:current",
            "KVBAKE_CONTAINER": deployment.launcher.container, "KVBAKE_ENV_FILE": str(files[ENV_FILE]),
            "KVBAKE_ARGS_FILE": str(files[ARGS_FILE]), "KVBAKE_MAX_MODEL_LEN": str(release.max_model_len),
            "KVBAKE_LAUNCHER_ARGS": shlex.join(settings.argv()), "KVBAKE_LAUNCHER_ARGS_JSON": json.dumps(settings.argv()),
            "KVBAKE_PRESET": release.preset, "KVBAKE_NODE_RANK": str(node_rank(deployment, name)), "KVBAKE_NNODES": str(len(deployment.nodes)),
            "KVBAKE_NODE_ADDRESS": node.address, "KVBAKE_HEAD_ADDRESS": head.address if head else "",
            "KVBAKE_DRAFTER_URL": drafter.url if drafter else "",
            "KVBAKE_DRAFTER_MAX_POSITIONS": str(drafter.max_positions) if drafter and drafter.max_positions else "",
            "KVBAKE_NODE_LAUNCH_JSON": node.launch.to_json(), "KVBAKE_WORKDIR": str((release.image_config or {}).get("WorkingDir") or "")}
