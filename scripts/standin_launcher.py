"""Stand-in launcher: recreates the serving container on $DOCKER_HOST from $KVBAKE_IMAGE with the release's env file.

An operator's real launcher does the same with `vllm serve` and its arguments; kvbake runs it once per node with
DOCKER_HOST, KVBAKE_IMAGE, KVBAKE_CONTAINER, KVBAKE_ENV_FILE, KVBAKE_MAX_MODEL_LEN, KVBAKE_LAUNCHER_ARGS (shell-quoted),
KVBAKE_LAUNCHER_ARGS_JSON (a JSON array), KVBAKE_NODE and KVBAKE_ROLE set. The arguments are recorded in a label, as
the JSON array, so that tests can see they arrived whole.
"""

from __future__ import annotations

import os
import sys

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

SERVE = "import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: exit(0))\nwhile True: time.sleep(3600)\n"


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
    try:
        client.run(os.environ["KVBAKE_IMAGE"], ["-c", SERVE], entrypoint="python3", name=name, detach=True,
                   networks=["none"], env_files=[os.environ["KVBAKE_ENV_FILE"]], labels=labels, pull="never",
                   restart="unless-stopped")
    except DockerException as err:
        print(f"launcher: {(err.stderr or '').strip().splitlines()[-1:] or err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
