"""Render Dockerfile.overlay from the manifest and lock: FROM the pinned base, COPY, whiteouts, LABEL, no switch ENV."""

from __future__ import annotations

import json

from kvbake.bake.core.plan import Plan

HEADER = "# Rendered by `python build.py dockerfile` from {manifest} (sha256 {sha}) and its lock; do not edit by hand.\n"


def base_reference(plan: Plan) -> str:
    """By registry digest when the lock knows one; else the local image ID (the base is never pulled)."""
    base = plan.lock.base
    if base.repo_digest:
        return f"{plan.manifest.base.image.rsplit(':', 1)[0]}@{base.repo_digest}"
    return base.config_digest


def render(plan: Plan, local_base: str | None = None) -> str:
    """The Dockerfile; `local_base` (the checked base's ID in this engine's store) replaces the portable FROM for a
    build, so the builder always finds the base locally and never reaches for a registry."""
    lines = [HEADER.format(manifest=plan.manifest.path.name, sha=plan.lock.manifest_sha256)]
    if plan.manifest.standin:
        lines.append("# STAND-IN example: not the production chain.\n")
    lines.append(f"FROM {local_base or base_reference(plan)}\n")
    lines.append(f"COPY overlay/ {plan.lock.source_root}/\n")
    if plan.whiteouts:
        lines.append(f"RUN {json.dumps(['rm', '-f', *('/' + w for w in plan.whiteouts)])}\n")
    labels = " \\\n      ".join(f"{json.dumps(k)}={json.dumps(v)}" for k, v in sorted(plan.labels.items()))
    lines.append(f"LABEL {labels}\n")
    return "".join(lines)
