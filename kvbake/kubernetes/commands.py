"""The kubernetes command (export-k8s): one function, returning (data for --json, text for people)."""

from __future__ import annotations

import argparse
import re
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from kvbake.command_output import Result
from kvbake.errors import UsageError
from kvbake.manifest import Manifest

if TYPE_CHECKING:
    from kvbake.kubernetes.core.release_export import ExportOptions

STDOUT = "-"
# Kubernetes' names: a DNS label for the set (it names a Service) and the namespace, a DNS subdomain for the others.
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def shown_path(manifest: Manifest, folder: Path) -> str:
    folder = folder.absolute()
    return str(folder.relative_to(manifest.root)) if folder.is_relative_to(manifest.root) else str(folder)


def checked_name(option: str, value: str, pattern: re.Pattern[str], what: str) -> str:
    if not pattern.match(value):
        raise UsageError(f"{option} {value!r} is not a Kubernetes name ({what})",
                         f"pass {option} with lower-case letters, digits and '-' only")
    return value


def export_options(args: argparse.Namespace, manifest: Manifest) -> ExportOptions:
    """The user's choices, each name checked as Kubernetes will check it; the model's host folder an absolute path."""
    from kvbake.kubernetes.core.release_export import ExportOptions
    from kvbake.kubernetes.core.serve_pods import ModelVolume, PodChoices
    from kvbake.launcher.core.node_launch import LaunchInputError, absolute_path

    name = checked_name("--name", args.name or manifest.name, DNS_LABEL, "a DNS label; the default is the manifest's name")
    namespace = checked_name("--namespace", args.namespace or name, DNS_LABEL, "a DNS label")
    subdomains = {option: checked_name(option, value, DNS_SUBDOMAIN, "a DNS subdomain") if value else ""
                  for option, value in (("--secret", args.secret), ("--model-claim", args.model_claim),
                                        ("--pull-secret", args.pull_secret))}
    try:
        host_path = absolute_path("--model-host-path", args.model_host_path, "pass the model folder's absolute path on every GPU node") \
            if args.model_host_path else ""
    except LaunchInputError as err:
        raise UsageError(err.cause, err.fix) from None
    pods = PodChoices(ModelVolume(subdomains["--model-claim"], host_path), subdomains["--secret"], subdomains["--pull-secret"])
    return ExportOptions(name, namespace, args.replicas, pods, args.policy)


def cmd_export_k8s(args: argparse.Namespace) -> Result:
    from kvbake.deployfile import load_deployment
    from kvbake.kubernetes.adapters.export_folder import refuse_existing, write_export
    from kvbake.kubernetes.core.crd_schemas import pinned_crds
    from kvbake.kubernetes.core.release_export import export_release, summary_lines
    from kvbake.kubernetes.core.yaml_text import stream_text
    from kvbake.lock import read_lock
    from kvbake.manifest import load_manifest
    from kvbake.serve.core.presets import check_reason, choose_preset
    from kvbake.ship.core.push_record import pushed_image

    manifest = load_manifest(args.manifest)
    to_stdout = str(args.out) == STDOUT
    shown = STDOUT if to_stdout else shown_path(manifest, args.out)
    if not to_stdout:
        refuse_existing(args.out, shown, args.force)
    check_reason(args.reason)
    options = export_options(args, manifest)
    lock = read_lock(manifest)
    chosen = choose_preset(manifest, args.preset, args.allow_held, args.allow_untested, args.reason)
    deployment = load_deployment(args.deploy)
    export = export_release(manifest, lock, deployment, pushed_image(manifest, lock), chosen, options)
    files, checked = export.files(), pinned_crds()
    lines = summary_lines(export, options, checked)
    data = {"out": shown, "files": list(files), "release_id": export.release.id, "preset": export.release.preset,
            "image": export.release.image, "config_digest": export.release.config_digest, "replicas": options.replicas,
            "group_size": export.group_size, "namespace": options.namespace, "checked": checked,
            "not_in_pods": [asdict(setting) for setting in export.node_only]}
    if to_stdout:
        return data | {"documents": files}, stream_text(list(export.documents.values()), lines).rstrip("\n")
    write_export(args.out, files, shown, args.force)
    return data, "\n".join([f"wrote {shown}: {', '.join(files)}", *lines])
