"""The leader's and the workers' pod templates: the pair's vLLM serve, as the reference launcher writes it, in pods."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kvbake.deployfile import Deployment
from kvbake.errors import ManifestError
from kvbake.launcher.core.launch_plan import (ENTRYPOINT, ENV_NAME, HEAD_ENTRY, RAY_BACKEND, WORKER_ENTRY, LaunchSettings,
                                              option_values, read_settings, vllm_args)
from kvbake.launcher.core.node_launch import MODEL_MOUNT, LaunchInputError
from kvbake.serve.core.runtime_config import ARGS_FILE, ENV_FILE, RankSettings
from kvbake.ship.core.launcher_variables import launcher_variables
from kvbake.ship.core.release import Release

# What LeaderWorkerSet gives every pod of a group; kubelet expands `$(NAME)` in a container's arguments.
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
POD_IP = "POD_IP"  # the pod's own address, from the downward API, where the pair gives the node's
CONTAINER = "vllm"
SHM_VOLUME, MODEL_VOLUME = "dshm", "model"
GPU_RESOURCE = "nvidia.com/gpu"
HEALTH_PATH = "/health"
QUANTITY_UNITS = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}  # docker's sizes are binary multiples
SIZE = re.compile(r"^([0-9]+)([bkmg]?)$")


@dataclass(frozen=True)
class ModelVolume:
    """Where the model comes from: a claim the user names, or a folder on every node."""

    claim: str = ""
    host_path: str = ""

    def volume(self) -> dict[str, Any]:
        if self.claim:
            return {"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": self.claim, "readOnly": True}}
        return {"name": MODEL_VOLUME, "hostPath": {"path": self.host_path, "type": "Directory"}}


@dataclass(frozen=True)
class PodChoices:
    """What the user names for the pods: the model's volume, the Secret holding the serve's secrets, the pull secret."""

    model: ModelVolume
    secret: str = ""
    pull_secret: str = ""


def quantity(size: str) -> str:
    """A docker size (`16g`) as a Kubernetes quantity (`16Gi`)."""
    number, unit = SIZE.match(size).groups()
    return number + QUANTITY_UNITS[unit]


def launch_error(deployment: Deployment, err: LaunchInputError) -> ManifestError:
    return ManifestError(f"{deployment.path.name}: launcher.env: {err.cause}", err.fix)


def secret_names(deployment: Deployment) -> tuple[str, ...]:
    """The serve's secret variables, by name (launcher.env SECRET_ENV, a JSON array), sorted."""
    raw = deployment.launcher.env.get("SECRET_ENV", "")
    try:
        names = json.loads(raw) if raw else []
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(name, str) and ENV_NAME.match(name) for name in names):
        raise ManifestError(f"{deployment.path.name}: launcher.env SECRET_ENV is not a JSON array of variable names",
                            'set SECRET_ENV to the names only, e.g. ["HF_TOKEN"]')
    return tuple(sorted(set(names)))


def pod_variables(deployment: Deployment, release: Release, settings: RankSettings, role: str) -> dict[str, str]:
    """The variables the launcher would be given on the first node of `role`, as a pod sees them: the image by digest,
    the head's address and the node's own from LeaderWorkerSet and the pod, no node's own launch settings (a pod
    template is the same on every node), the model always the volume at the launcher's model mount, served under the
    pair's name; secrets are the pod's to take from the Secret, so the launcher's check of their values is left out."""
    node = next(n for n in deployment.nodes if n.role == role)
    files = {ENV_FILE: Path(ENV_FILE), ARGS_FILE: Path(ARGS_FILE)}
    variables = launcher_variables(deployment, "", node.name, release, settings, files)
    hub_model = variables.pop("MODEL", "")
    variables.pop("SECRET_ENV", None)
    return {**variables, "KVBAKE_IMAGE": release.image, "KVBAKE_HEAD_ADDRESS": LEADER_ADDRESS,
            "KVBAKE_NODE_ADDRESS": f"$({POD_IP})", "KVBAKE_NODE_LAUNCH_JSON": "",
            "MODEL_DIR": variables.get("MODEL_DIR") or MODEL_MOUNT,
            "SERVED_MODEL_NAME": variables.get("SERVED_MODEL_NAME") or hub_model}


def pod_settings(deployment: Deployment, release: Release, settings: RankSettings, role: str) -> LaunchSettings:
    """The reference launcher's checked settings for one role; its refusals name deploy.yaml."""
    try:
        launch = read_settings(pod_variables(deployment, release, settings, role))
    except LaunchInputError as err:
        raise launch_error(deployment, err) from None
    if launch.shape == "ray" or "ray" in option_values(launch.preset_args, RAY_BACKEND[0]):
        raise ManifestError(f"{deployment.path.name}: the serve runs through Ray (SHAPE=ray or the preset's {RAY_BACKEND[0]} ray)",
                            "a LeaderWorkerSet export writes vLLM's multiprocessing backend: serve the pair with SHAPE=main or exec")
    return launch


def serve_command(launch: LaunchSettings) -> list[str]:
    """The entry module and vLLM's arguments exactly as the launcher gives them, the node rank read from the pod's
    worker index (the leader's is 0)."""
    entry = WORKER_ENTRY if launch.topology.role == "worker" else HEAD_ENTRY
    args = [*entry, *vllm_args(launch)]
    if "--node-rank" in args:
        args[args.index("--node-rank") + 1] = WORKER_INDEX
    return args


def env_entries(launch: LaunchSettings, settings: RankSettings, secrets: tuple[str, ...], secret: str) -> list[dict[str, Any]]:
    """The switch set (as the pair's env file gives it), the launcher's shared container variables, then each secret
    from the Secret by its variable's name; the pod's address first when a variable names it."""
    entries = [{"name": name, "value": value} for name, value in sorted(settings.switches.items())]
    entries += [{"name": name, "value": value} for name, value in sorted(launch.container_env.items())]
    entries += [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}} for name in secrets]
    if any(f"$({POD_IP})" in entry.get("value", "") for entry in entries):
        entries.insert(0, {"name": POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return entries


def container(launch: LaunchSettings, settings: RankSettings, secrets: tuple[str, ...], choices: PodChoices,
              capabilities: tuple[str, ...]) -> dict[str, Any]:
    """The serving container of one role: vLLM as its main process, one GPU, /dev/shm and the model mounted."""
    leader = launch.topology.role == "head"
    spec: dict[str, Any] = {
        "name": CONTAINER, "image": launch.image, "imagePullPolicy": "IfNotPresent", "command": [ENTRYPOINT],
        "args": serve_command(launch), "env": env_entries(launch, settings, secrets, choices.secret),
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"},
                         {"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": True}],
    }
    if launch.gpus != "none":
        spec["resources"] = {"limits": {GPU_RESOURCE: 1}}
    if leader:
        spec["ports"] = [{"name": "http", "containerPort": launch.port}]
        spec["readinessProbe"] = {"httpGet": {"path": HEALTH_PATH, "port": "http"}, "periodSeconds": 10, "failureThreshold": 3}
    if capabilities:
        spec["securityContext"] = {"capabilities": {"add": list(capabilities)}}
    return spec


def pod_template(launch: LaunchSettings, settings: RankSettings, secrets: tuple[str, ...], choices: PodChoices,
                 capabilities: tuple[str, ...], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A pod template of one role: its container, the memory-backed /dev/shm and the model's volume."""
    spec: dict[str, Any] = {
        "containers": [container(launch, settings, secrets, choices, capabilities)],
        "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": quantity(launch.shm_size)}},
                    choices.model.volume()],
    }
    if choices.pull_secret:
        spec["imagePullSecrets"] = [{"name": choices.pull_secret}]
    return {"metadata": dict(metadata), "spec": spec}
