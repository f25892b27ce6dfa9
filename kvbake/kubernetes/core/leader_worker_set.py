"""The LeaderWorkerSet of a release: one group per pair, the group restarted whole, rolled one group at a time."""

from __future__ import annotations

from typing import Any, Mapping

from kvbake.bake.core.provenance import OWN
from kvbake.digests import sha256_hex
from kvbake.kubernetes.core.crd_schemas import LWS_API
from kvbake.ship.core.release import Release

ANNOTATION_PREFIX = "kvbake.org/"  # the reverse of the images' label namespace, org.kvbake.
CHAIN_LABEL = OWN + "chain"
NAME_LABEL, COMPONENT_LABEL = "app.kubernetes.io/name", "app.kubernetes.io/component"


def release_annotations(release: Release) -> dict[str, str]:
    """What identifies the release on the set and on every pod: its id, preset and config digest, and the chain's hash
    (sha256 of the image's org.kvbake.chain label: each patch's id and sha256, in chain order)."""
    return {ANNOTATION_PREFIX + "release-id": release.id, ANNOTATION_PREFIX + "preset": release.preset,
            ANNOTATION_PREFIX + "config-digest": release.config_digest,
            ANNOTATION_PREFIX + "chain-sha256": sha256_hex(release.labels[CHAIN_LABEL].encode("utf-8"))}


def pod_metadata(name: str, component: str, release: Release) -> dict[str, Any]:
    return {"labels": {NAME_LABEL: name, COMPONENT_LABEL: component}, "annotations": release_annotations(release)}


def leader_worker_set(name: str, namespace: str, replicas: int, size: int, release: Release,
                      templates: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The set: `replicas` groups of `size` pods (a leader and size-1 workers, one per rank). A pod that fails
    restarts its whole group (the ranks cannot rejoin one by one, as kvbake restarts the gang); an update replaces one
    group at a time and starts none beside it (a pair holds every GPU its nodes have)."""
    return {
        "apiVersion": LWS_API, "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {NAME_LABEL: name},
                     "annotations": release_annotations(release)},
        "spec": {
            "replicas": replicas, "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1}},
            "leaderWorkerTemplate": {"size": size, "restartPolicy": "RecreateGroupOnPodRestart",
                                     "leaderTemplate": dict(templates["leader"]), "workerTemplate": dict(templates["worker"])},
        },
    }
