"""A pushed release as Kubernetes documents: built from manifest, lock, push record and deploy.yaml, then checked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kvbake.attest.core.slsa import provenance_predicate
from kvbake.deployfile import Deployment
from kvbake.errors import IntegrityError, SignatureError, UsageError
from kvbake.kubernetes.core import image_policy
from kvbake.kubernetes.core.crd_schemas import schema_problems
from kvbake.kubernetes.core.leader_worker_set import leader_worker_set, pod_metadata
from kvbake.kubernetes.core.node_only_settings import NodeOnlySetting, node_only_settings, shared_capabilities
from kvbake.kubernetes.core.own_checks import Expected, own_problems
from kvbake.kubernetes.core.serve_pods import PodChoices, pod_settings, pod_template, secret_names
from kvbake.kubernetes.core.yaml_text import document_text
from kvbake.lock import Lock
from kvbake.manifest import Manifest
from kvbake.serve.core.presets import ChosenPreset
from kvbake.serve.core.runtime_config import settings_of_preset
from kvbake.ship.core.release import PushedImage, Release, make_release

# In the order `kubectl apply -f DIR` reads them: the namespace first, the policies before the pods they admit.
NAMESPACE_FILE, SIGNATURE_FILE, PROVENANCE_FILE, LWS_FILE = (
    "1-namespace.yaml", "2-signature-policy.yaml", "3-provenance-policy.yaml", "4-leaderworkerset.yaml")
EXPORTED_BY = "export-k8s"


@dataclass(frozen=True)
class ExportOptions:
    """What the user chose: the set's name and namespace, its groups, the pods' volumes and secrets, the policies."""

    name: str
    namespace: str
    replicas: int
    pods: PodChoices
    policy: bool = True


@dataclass(frozen=True)
class Export:
    """The release, its documents by file name (data and YAML text), and what the pods go without."""

    release: Release
    documents: Mapping[str, Mapping[str, Any]]
    node_only: tuple[NodeOnlySetting, ...]
    group_size: int

    def files(self) -> dict[str, str]:
        return {name: document_text(document) for name, document in self.documents.items()}


def check_secret_choice(deployment: Deployment, secrets: tuple[str, ...], secret: str) -> None:
    """Secrets reach the pods from one Secret keyed by variable name: named when the serve has secrets, else not."""
    if secrets and not secret:
        raise UsageError(f"{deployment.path.name} names the serve's secret variables {', '.join(secrets)} (SECRET_ENV)",
                         "pass --secret NAME, the Secret that holds each of them under its variable's name")
    if secret and not secrets:
        raise UsageError(f"--secret {secret} is given but {deployment.path.name} names no secret variable (SECRET_ENV)",
                         "leave --secret out, or list the serve's secret variables in launcher.env SECRET_ENV")


def check_signing_keys(deployment: Deployment, policy: bool) -> None:
    if policy and not deployment.signing.keys:
        raise SignatureError(f"{deployment.path.name} lists no signing key, so no ClusterImagePolicy can name whose "
                             "signature admits the release", "list the reviewers' public keys under signing.keys "
                             "(python build.py keys makes a pair), or pass --no-policy")


def pod_templates(deployment: Deployment, release: Release, chosen: ChosenPreset, manifest: Manifest, lock: Lock,
                  options: ExportOptions) -> dict[str, dict[str, Any]]:
    """The leader's template (the head's serve) and the workers' (a worker's serve, headless); a one-node deployment's
    group has its leader only, whose template both are."""
    settings = settings_of_preset(manifest, chosen, lock.core_sha256())
    secrets = secret_names(deployment)
    roles = {"leader": "head", "worker": "worker" if len(deployment.nodes) > 1 else "head"}
    return {component: pod_template(pod_settings(deployment, release, settings, role), settings, secrets, options.pods,
                                    shared_capabilities(deployment), pod_metadata(options.name, component, release))
            for component, role in roles.items()}


def build_documents(manifest: Manifest, lock: Lock, deployment: Deployment, release: Release, chosen: ChosenPreset,
                    options: ExportOptions) -> dict[str, dict[str, Any]]:
    """Every document of the export, by file name."""
    documents = {NAMESPACE_FILE: image_policy.namespace(options.namespace, options.policy)}
    repository, _, digest = release.image.partition("@")
    if options.policy:
        keys, pull = deployment.signing.keys, options.pods.pull_secret
        materials = provenance_predicate(lock, manifest.path.name)["materials"]
        documents[SIGNATURE_FILE] = image_policy.signature_policy(options.name, repository, keys, pull)
        documents[PROVENANCE_FILE] = image_policy.provenance_policy(options.name, repository, digest, release.config_digest,
                                                                    materials, keys, pull)
    templates = pod_templates(deployment, release, chosen, manifest, lock, options)
    documents[LWS_FILE] = leader_worker_set(options.name, options.namespace, options.replicas, len(deployment.nodes),
                                            release, templates)
    return documents


def check_documents(documents: Mapping[str, Mapping[str, Any]], expected: Expected) -> None:
    """Every document against its kind's pinned schema, then kvbake's own checks; all problems in one refusal."""
    problems = [f"{name}: {problem}" for name, document in documents.items() for problem in schema_problems(document)]
    problems += own_problems(documents, expected)
    if problems:
        raise IntegrityError(f"the Kubernetes export fails its checks: {'; '.join(problems)}",
                             "nothing was written; fix the deploy.yaml or preset value the field comes from, or report "
                             "it with --debug output")


def export_release(manifest: Manifest, lock: Lock, deployment: Deployment, pushed: PushedImage, chosen: ChosenPreset,
                   options: ExportOptions) -> Export:
    """The export of the pushed release with the chosen preset, checked before anything is written."""
    check_signing_keys(deployment, options.policy)
    secrets = secret_names(deployment)
    check_secret_choice(deployment, secrets, options.pods.secret)
    release = make_release(pushed, chosen, manifest, EXPORTED_BY, EXPORTED_BY)
    documents = build_documents(manifest, lock, deployment, release, chosen, options)
    check_documents(documents, Expected(release.image, secrets, options.policy, options.namespace))
    return Export(release, documents, tuple(node_only_settings(deployment)), len(deployment.nodes))


def summary_lines(export: Export, options: ExportOptions, checked: Mapping[str, str]) -> list[str]:
    """What the export holds and was checked against, then every deploy.yaml setting the pods go without."""
    release = export.release
    lines = [f"release {release.id} (preset {release.preset}): {release.image}",
             f"{options.replicas} group(s) of {export.group_size} pod(s) each: a leader and {export.group_size - 1} worker(s), "
             f"namespace {options.namespace}, policies: {'enforced there' if options.policy else 'none (--no-policy)'}",
             "checked offline: " + ", ".join(f"{kind} against {file}" for kind, file in checked.items()) +
             "; the image by digest, secrets by secretKeyRef only, a key authority per signing key, the namespace's include label"]
    if export.node_only:
        lines.append("not in the pods (deploy.yaml gives it; Kubernetes does it another way):")
        lines += [f"  {setting.line()}" for setting in export.node_only]
    return lines
