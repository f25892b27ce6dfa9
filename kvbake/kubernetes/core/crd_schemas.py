"""The pinned CRDs (package data): each kind's openAPIV3Schema for its apiVersion, and a document checked against it."""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any, Mapping

import jsonschema
import yaml

from kvbake.yaml_documents import describe_schema_error

CRD_FOLDER = "data/k8s"
LWS_API = "leaderworkerset.x-k8s.io/v1"
CIP_API = "policy.sigstore.dev/v1beta1"
# (apiVersion, kind) -> the pinned CRD file that defines it; the file names carry the upstream commits.
CRD_FILES = {(LWS_API, "LeaderWorkerSet"): "lws-060ab4d.yaml",
             (CIP_API, "ClusterImagePolicy"): "policy-controller-cip-f925c0c.yaml"}
# An object schema that says this keeps the fields it does not list (Kubernetes' own marker).
KEEPS_UNKNOWN = "x-kubernetes-preserve-unknown-fields"


def crd_text(file_name: str) -> str:
    return resources.files("kvbake").joinpath(f"{CRD_FOLDER}/{file_name}").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def crd(file_name: str) -> dict[str, Any]:
    """One pinned CRD, parsed once (the LeaderWorkerSet's is 1.3 MB: libyaml's loader when pyyaml has it)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(crd_text(file_name), Loader=loader)  # noqa: S506 - a safe loader


def version_schema(api_version: str, kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of the CRD version that serves `api_version` for `kind`."""
    definition = crd(CRD_FILES[(api_version, kind)])
    group, _, version = api_version.partition("/")
    assert definition["spec"]["group"] == group and definition["spec"]["names"]["kind"] == kind
    return next(v["schema"]["openAPIV3Schema"] for v in definition["spec"]["versions"] if v["name"] == version)


def closed(schema: Any) -> Any:
    """The schema with every object that lists its fields closed to others, as the API server's strict field
    validation (kubectl's default) refuses an unknown field instead of dropping it; an object marked to keep unknown
    fields, or whose values are typed by additionalProperties, stays as it is."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: closed(value) for key, value in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema and not schema.get(KEEPS_UNKNOWN):
        result["additionalProperties"] = False
    return result


@functools.lru_cache(maxsize=None)
def validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    """A validator of the kind's closed schema. Draft 4 is the JSON Schema dialect OpenAPI v3 schemas are written in;
    Kubernetes' own keywords (x-kubernetes-*, CEL rules) are not JSON Schema and are not evaluated offline."""
    schema = copy.deepcopy(version_schema(api_version, kind))
    # The top level stays open: apiVersion, kind and metadata are the API server's own, which a CRD need not list.
    schema["properties"] = {name: closed(field) for name, field in schema.get("properties", {}).items()}
    return jsonschema.Draft4Validator(schema)


def is_checked(document: Mapping[str, Any]) -> bool:
    return (document.get("apiVersion"), document.get("kind")) in CRD_FILES


def schema_problems(document: Mapping[str, Any]) -> list[str]:
    """Every way `document` breaks its kind's pinned schema, each with its path; a kind without a pinned CRD has none."""
    if not is_checked(document):
        return []
    errors = validator(document["apiVersion"], document["kind"]).iter_errors(document)
    return [describe_schema_error(err) for err in sorted(errors, key=lambda e: list(map(str, e.absolute_path)))]


def pinned_crds() -> dict[str, str]:
    """Which pinned file each checked kind was validated against, as `apiVersion Kind`: file."""
    return {f"{api} {kind}": name for (api, kind), name in CRD_FILES.items()}
