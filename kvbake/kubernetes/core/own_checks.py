"""kvbake's own checks of the export, which the CRD schemas cannot express: digest, secrets, key authority, include label."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from kvbake.attest.core.admission import SLSA_V02
from kvbake.deployfile import PUBLIC_KEY_HEADER
from kvbake.kubernetes.core.image_policy import INCLUDE_LABEL, SIGNATURE_FORMAT
from kvbake.secret_env import is_secret
from kvbake.ship.core.push_record import DIGEST_REFERENCE

POD_TEMPLATES = ("leaderTemplate", "workerTemplate")
POLICY_KIND, NAMESPACE_KIND, LWS_KIND = "ClusterImagePolicy", "Namespace", "LeaderWorkerSet"


@dataclass(frozen=True)
class Expected:
    """What the documents must hold: the pushed digest reference, the serve's secret variables, whether policies go with
    the export, and the namespace."""

    image: str
    secrets: tuple[str, ...]
    policy: bool
    namespace: str


def containers(lws: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every container (init containers too) of both pod templates, with its path."""
    template = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    for role in POD_TEMPLATES:
        spec = (template.get(role) or {}).get("spec") or {}
        for field in ("initContainers", "containers"):
            for index, item in enumerate(spec.get(field) or []):
                yield f"spec.leaderWorkerTemplate.{role}.spec.{field}[{index}]", item


def image_problems(lws: Mapping[str, Any], expected: Expected) -> list[str]:
    """Every container pulls the pushed release by its digest, never by a tag (a tag can name other content)."""
    return [f"{path}.image {item.get('image')!r} is not the pushed digest reference {expected.image}"
            for path, item in containers(lws)
            if item.get("image") != expected.image or not DIGEST_REFERENCE.match(str(item.get("image")))]


def secret_problems(lws: Mapping[str, Any], expected: Expected) -> list[str]:
    """A secret variable (deploy.yaml's SECRET_ENV, or a name or value that is a secret's) comes from a Secret, by
    secretKeyRef only: never as a value in the document."""
    problems = []
    for path, item in containers(lws):
        for index, entry in enumerate(item.get("env") or []):
            name, where = str(entry.get("name")), f"{path}.env[{index}]"
            secret = name in expected.secrets or is_secret(name, str(entry.get("value", "")))
            if secret and ("value" in entry or "secretKeyRef" not in (entry.get("valueFrom") or {})):
                problems.append(f"{where} gives the secret {name} inline, not from a Secret by secretKeyRef")
    return problems


def authority_problems(policy: Mapping[str, Any], where: str) -> list[str]:
    """A policy admits by reviewers' keys: each authority has a public key, no keyless or static way, no transparency
    log, kvbake's signature format; a provenance authority attests SLSA provenance v0.2 by its full type."""
    authorities = (policy.get("spec") or {}).get("authorities") or []
    if not authorities:
        return [f"{where}: spec.authorities lists no key authority"]
    problems = []
    for index, authority in enumerate(authorities):
        at = f"{where}: spec.authorities[{index}]"
        if not str((authority.get("key") or {}).get("data", "")).lstrip().startswith(PUBLIC_KEY_HEADER):
            problems.append(f"{at} has no public key")
        problems += [f"{at} gives {field}" for field in ("keyless", "static", "ctlog") if field in authority]
        if authority.get("signatureFormat") != SIGNATURE_FORMAT:
            problems.append(f"{at}.signatureFormat is not {SIGNATURE_FORMAT}, the format kvbake signs in")
        problems += [f"{at}.attestations[{n}].predicateType is not {SLSA_V02}" for n, attestation
                     in enumerate(authority.get("attestations") or []) if attestation.get("predicateType") != SLSA_V02]
    return problems


def namespace_problems(documents: Mapping[str, Mapping[str, Any]], expected: Expected) -> list[str]:
    """The serve's namespace is exported, and with policies it carries the label that makes the policy-controller
    enforce them there."""
    namespaces = [d for d in documents.values() if d.get("kind") == NAMESPACE_KIND]
    named = [d for d in namespaces if (d.get("metadata") or {}).get("name") == expected.namespace]
    if not named:
        return [f"no Namespace document names {expected.namespace}, the LeaderWorkerSet's namespace"]
    labels = (named[0].get("metadata") or {}).get("labels") or {}
    if expected.policy and labels.get(INCLUDE_LABEL) != "true":
        return [f"Namespace {expected.namespace} lacks the label {INCLUDE_LABEL}: \"true\", so no policy would be enforced there"]
    return []


def own_problems(documents: Mapping[str, Mapping[str, Any]], expected: Expected) -> list[str]:
    """Every own check over the documents, by file name."""
    problems = namespace_problems(documents, expected)
    kinds = [d.get("kind") for d in documents.values()]
    if expected.policy and POLICY_KIND not in kinds:
        problems.append("no ClusterImagePolicy: nothing would check the release's signature at admission")
    for name, document in documents.items():
        if document.get("kind") == LWS_KIND:
            problems += [f"{name}: {p}" for p in (*image_problems(document, expected), *secret_problems(document, expected))]
            if (document.get("metadata") or {}).get("namespace") != expected.namespace:
                problems.append(f"{name}: metadata.namespace is not {expected.namespace}")
        elif document.get("kind") == POLICY_KIND:
            problems += authority_problems(document, name)
    return problems

