"""Stand-in launcher: recreates the serving container on $DOCKER_HOST from $KVBAKE_IMAGE with the release's env file.

An operator's real launcher does the same with vLLM and its arguments (scripts/launch_vllm.py); kvbake runs it once
per node with the variables the README lists. The arguments are recorded in a label, as the JSON array, so that tests
can see they arrived whole. Without STANDIN_SERVE the container sleeps with no network; with STANDIN_SERVE=1 it runs
scripts/standin_serve.py on the host network: the head answers /health once its delay passed and every worker joined
(STANDIN_API_PORT, STANDIN_RENDEZVOUS_PORT, STANDIN_DELAY_S; STANDIN_CRASH_IF=NAME=VALUE fails its start-up,
STANDIN_STALL_IF=NAME=VALUE keeps it starting for ever).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

SERVE = "import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: exit(0))\nwhile True: time.sleep(3600)\n"


def serving_command() -> tuple[list[str], str, dict[str, str]]:
    """The container's python3 arguments, its network and extra variables: the sleeping stand-in, or the serve."""
    if os.environ.get("STANDIN_SERVE") != "1":
        return ["-c", SERVE], "none", {}
    source = (Path(__file__).resolve().parent / "standin_serve.py").read_text()
    workers = int(os.environ.get("KVBAKE_NNODES", "1")) - 1
    argv = [os.environ.get("KVBAKE_ROLE", "head"), os.environ["STANDIN_API_PORT"], os.environ["STANDIN_RENDEZVOUS_PORT"], str(workers),
            os.environ.get("STANDIN_DELAY_S", "0"), os.environ.get("KVBAKE_HEAD_ADDRESS") or "127.0.0.1", os.environ.get("KVBAKE_NODE", "")]
    envs = {name: os.environ[name] for name in ("STANDIN_CRASH_IF", "STANDIN_STALL_IF") if os.environ.get(name)}
    return ["-c", source, *argv], "host", envs


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
    command, network, envs = serving_command()
    try:
        client.run(os.environ["KVBAKE_IMAGE"], command, entrypoint="python3", name=name, detach=True,
                   networks=[network], env_files=[os.environ["KVBAKE_ENV_FILE"]], envs=envs, labels=labels, pull="never",
                   restart="unless-stopped")
    except DockerException as err:
        print(f"launcher: {(err.stderr or '').strip().splitlines()[-1:] or err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
