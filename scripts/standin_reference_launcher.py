"""The reference launcher (kvbake-launch-vllm) for the rig: the same variables, the same checked plan and the same
engine calls, with the stand-in programs in place of vLLM and Ray, which the stand-in base image does not run.

The plan comes from kvbake.launcher.core.launch_plan, exactly as the reference launcher makes it from what kvbake and
the deployment file (as `init` writes it) pass; only the programs change: `python3 -m vllm.entrypoints…` becomes
`python3 /opt/kvbake-standin/vllm serve` and, unless the image holds Ray (the Ray stand-in base's label says so),
`ray start` becomes `python3 /opt/kvbake-standin/ray start`, both read from the stand-in folder mounted read-only (a serve started by hand mounts it too, and `init` carries that mount in
EXTRA_MOUNTS; it is added when missing). `--print` shows the calls; exit codes are the reference launcher's.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from kvbake.launcher.cli import checked_plan, run
from kvbake.launcher.core.launch_plan import DockerRun, StopServe
from kvbake.launcher.core.node_launch import Mount

STANDIN_DIR = Path(__file__).resolve().parent / "standin_vllm"
MOUNT = "/opt/kvbake-standin"
VLLM_ENTRY = (f"{MOUNT}/vllm", "serve")


RAY_LABEL = "org.kvbake.standin.ray-version"  # scripts/standin_ray_base.py's image runs real Ray


def holds_ray(env) -> bool:
    """Whether the release's image is built on the Ray stand-in base (never asked with --print: no engine then)."""
    if "--print" in sys.argv or "--dry-run" in sys.argv:
        return False
    from python_on_whales import DockerClient

    labels = DockerClient(host=env["DOCKER_HOST"]).image.inspect(env["KVBAKE_IMAGE"]).config.labels or {}
    return RAY_LABEL in labels


def with_standin_programs(step: DockerRun, real_ray: bool = False) -> DockerRun:
    """The same plan, the stand-in's `vllm` in place of vLLM's entry modules, and its `ray` in place of Ray's console
    script unless the image runs real Ray."""
    cluster = step.cluster_command
    if cluster[:1] == ("ray",) and not real_ray:
        cluster = ("python3", f"{MOUNT}/ray", *cluster[1:])
    mounts = step.mounts
    if not any(m.target == MOUNT for m in mounts):
        mounts = (*mounts, Mount(str(STANDIN_DIR), MOUNT))
    return dataclasses.replace(step, entry=VLLM_ENTRY, cluster_command=cluster, mounts=mounts)


def standin_plan(env) -> DockerRun | StopServe:
    step = checked_plan(env)
    return with_standin_programs(step, step.cluster_command[:1] == ("ray",) and holds_ray(env)) if isinstance(step, DockerRun) else step


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:], os.environ, standin_plan))
