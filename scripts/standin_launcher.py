"""Stand-in launcher for the rig: recreates the serving container on $DOCKER_HOST from $KVBAKE_IMAGE, serving the stand-in
`vllm` console script (scripts/standin_vllm/vllm, mounted read-only at /opt/kvbake-standin) with the release's settings.

An operator's launcher does the same with vLLM itself (the reference launcher, docs/launcher.md); kvbake runs it once per
node with the variables docs/deploy.md lists. The serve's command line is vLLM's: `vllm serve MODEL --max-model-len N`
followed by the preset's arguments, exactly as kvbake passed them (also recorded in a label, as the JSON array).

STANDIN_SHAPE picks the serve shape: `main` (default: the stand-in vLLM is the container's main process, its switches in
the container's environment from the env file) or `exec` (the container runs `sleep infinity` and the stand-in vLLM is
started by `docker exec -d` with the env file, so its switches never show in the container's Env).
STANDIN_SERVE=1 makes the head answer /health on the host network once its delay passed and every worker joined
(STANDIN_API_PORT, STANDIN_RENDEZVOUS_PORT, STANDIN_DELAY_S; STANDIN_CRASH_IF=NAME=VALUE fails its start-up,
STANDIN_STALL_IF=NAME=VALUE keeps it starting for ever); without it the serve only waits, with no network.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

STANDIN_DIR = Path(__file__).resolve().parent / "standin_vllm"
MOUNT = "/opt/kvbake-standin"
MODEL = "/models/standin"


def vllm_command() -> list[str]:
    """`python3 /opt/kvbake-standin/vllm serve MODEL` and the arguments kvbake passed (max-model-len first)."""
    return ["python3", f"{MOUNT}/vllm", "serve", MODEL, *json.loads(os.environ.get("KVBAKE_LAUNCHER_ARGS_JSON") or "[]")]


def serve_environment() -> tuple[str, dict[str, str]]:
    """The container's network and the stand-in serve's own variables (none without STANDIN_SERVE)."""
    if os.environ.get("STANDIN_SERVE") != "1":
        return "none", {name: os.environ[name] for name in ("STANDIN_CRASH_IF",) if os.environ.get(name)}
    envs = {"STANDIN_ROLE": os.environ.get("KVBAKE_ROLE", "head"), "STANDIN_API_PORT": os.environ["STANDIN_API_PORT"],
            "STANDIN_RENDEZVOUS_PORT": os.environ["STANDIN_RENDEZVOUS_PORT"],
            "STANDIN_WORKERS": str(int(os.environ.get("KVBAKE_NNODES", "1")) - 1), "STANDIN_DELAY_S": os.environ.get("STANDIN_DELAY_S", "0"),
            "STANDIN_HEAD": os.environ.get("KVBAKE_HEAD_ADDRESS") or "127.0.0.1", "STANDIN_NODE": os.environ.get("KVBAKE_NODE", "")}
    envs.update({name: os.environ[name] for name in ("STANDIN_CRASH_IF", "STANDIN_STALL_IF") if os.environ.get(name)})
    return "host", envs


def main() -> int:
    client = DockerClient(host=os.environ["DOCKER_HOST"])
    name = os.environ["KVBAKE_CONTAINER"]
    try:
        client.container.remove(name, force=True)
    except DockerException:
        pass
    labels = {"kvbake.node": os.environ.get("KVBAKE_NODE", ""), "kvbake.role": os.environ.get("KVBAKE_ROLE", ""),
              "kvbake.max-model-len": os.environ.get("KVBAKE_MAX_MODEL_LEN", ""),
              "kvbake.launcher-args": os.environ.get("KVBAKE_LAUNCHER_ARGS_JSON", "[]")}
    network, envs = serve_environment()
    execd = os.environ.get("STANDIN_SHAPE", "main") == "exec"
    command = ["sleep", "infinity"] if execd else vllm_command()
    env_files = [] if execd else [os.environ["KVBAKE_ENV_FILE"]]
    try:
        client.run(os.environ["KVBAKE_IMAGE"], command[1:], entrypoint=command[0], name=name, detach=True, networks=[network],
                   env_files=env_files, envs=envs, labels=labels, pull="never", restart="no",
                   mounts=[["type=bind", f"source={STANDIN_DIR}", f"target={MOUNT}", "readonly"]])
        if execd:
            client.container.execute(name, vllm_command(), detach=True, env_files=[os.environ["KVBAKE_ENV_FILE"]])
    except DockerException as err:
        print(f"launcher: {(err.stderr or '').strip().splitlines()[-1:] or err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
