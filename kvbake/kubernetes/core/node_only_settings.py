"""What deploy.yaml gives a node's serve that a pod template cannot say, each with the usual Kubernetes way instead."""

from __future__ import annotations

import json
from dataclasses import dataclass

from kvbake.deployfile import Deployment

ULIMITS = ("a pod spec has no ulimits: the container runtime on each GPU node gives its own (raise them in the runtime's "
           "service, e.g. LimitMEMLOCK and LimitNOFILE of containerd's systemd unit)")
DEVICES = ("a pod gets a node's device through a device plugin that advertises it as a resource (an RDMA device plugin "
           "for /dev/infiniband), requested in the pod template's resources")
NODE_ENV = ("per-node variables (interface names, HCAs) have no per-node place in a pod template: add them to the "
            "templates once every GPU node agrees, or name the interfaces in the nodes' network set-up")
CAPABILITIES = ("the nodes ask for different capabilities and a pod template has one set: add the set every node "
                "needs to the templates' securityContext")
SHM_SIZE = "a pod template has one /dev/shm size, the launcher's SHM_SIZE: raise it in the templates for this node"
CACHE_MOUNTS = "writable caches on the node: give the templates a volume for them (a claim, or a hostPath)"
EXTRA_MOUNTS = "read-only folders of the nodes: give the templates a volume for each (a claim, or a hostPath)"


@dataclass(frozen=True)
class NodeOnlySetting:
    """One setting deploy.yaml gives (`source`: a node, or the launcher) that the export does not carry, and how
    Kubernetes does it instead."""

    source: str
    setting: str
    kubernetes_way: str

    def line(self) -> str:
        return f"{self.source}: {self.setting}: {self.kubernetes_way}"


def shared_capabilities(deployment: Deployment) -> tuple[str, ...]:
    """The capabilities every node's launch settings add, when they all add the same ones; else none."""
    sets = {tuple(sorted(node.launch.cap_add)) for node in deployment.nodes}
    return sets.pop() if len(sets) == 1 else ()


def node_only_settings(deployment: Deployment) -> list[NodeOnlySetting]:
    """Every node setting and launcher mount the pods go without, in the file's order."""
    found = []
    differing_capabilities = not shared_capabilities(deployment) and any(n.launch.cap_add for n in deployment.nodes)
    for node in deployment.nodes:
        launch = node.launch
        checks = [(bool(launch.ulimits), "ulimits " + ", ".join(launch.ulimit_options()), ULIMITS),
                  (bool(launch.devices), "devices " + ", ".join(launch.devices), DEVICES),
                  (bool(launch.env), "launch.env " + ", ".join(sorted(launch.env)), NODE_ENV),
                  (differing_capabilities and bool(launch.cap_add), "cap_add " + ", ".join(launch.cap_add), CAPABILITIES),
                  (bool(launch.shm_size), f"shm_size {launch.shm_size}", SHM_SIZE),
                  (bool(launch.cache_mounts), "cache_mounts " + ", ".join(f"{m.source}:{m.target}" for m in launch.cache_mounts),
                   CACHE_MOUNTS)]
        found += [NodeOnlySetting(node.name, setting, way) for present, setting, way in checks if present]
    extra = deployment.launcher.env.get("EXTRA_MOUNTS", "")
    if extra and json.loads(extra):
        found.append(NodeOnlySetting("launcher.env", f"EXTRA_MOUNTS {', '.join(json.loads(extra))}", EXTRA_MOUNTS))
    return found
