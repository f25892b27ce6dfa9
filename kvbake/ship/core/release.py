"""The release record: the immutable meaning of a deploy (image, layers, labels, preset, switches, who, when, why)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from kvbake.digests import canonical_json, sha256_hex
from kvbake.manifest import Manifest
from kvbake.serve.core.presets import ChosenPreset, preset_sha256


RUNTIME_KEYS = ("Env", "Entrypoint", "Cmd", "WorkingDir")


def runtime_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """What an image's config tells a container to run and with what: Env, Entrypoint, Cmd and WorkingDir, with an
    absent value and an empty one alike (engines report either)."""
    config = config or {}
    return {"Env": list(config.get("Env") or []), "Entrypoint": list(config.get("Entrypoint") or []),
            "Cmd": list(config.get("Cmd") or []), "WorkingDir": str(config.get("WorkingDir") or "")}


@dataclass(frozen=True)
class PushedImage:
    """What a release pulls (`repo@sha256:…`) and what every node checks that it holds: config digest, layers, every
    label, and the runtime part of its config."""

    pinned: str
    config_digest: str
    layers: tuple[str, ...]  # diff_ids: the locked base's, then the thin layer's
    labels: Mapping[str, str]  # every label on the image: the base's, then kvbake's own
    image_config: Mapping[str, Any] | None = None  # runtime_config() of the image: the base's, unchanged by the bake


@dataclass(frozen=True)
class Release:
    """What every rank must run; rollback restores the whole record, not just the image."""

    image: str
    config_digest: str
    layers: tuple[str, ...]
    labels: Mapping[str, str]
    preset: str
    switches: Mapping[str, str]
    max_model_len: int
    launcher_args: tuple[str, ...]
    deployed_by: str
    deployed_at: str
    reason: str
    override: str | None
    runtime_sha256: str | None = None  # the preset as the manifest stated it at deploy time; None in older records
    # A serve kvbake did not deploy, recorded by `adopt`: its container's ID and name. Rollback restarts that very
    # container (kept stopped under another name meanwhile), so its image, env, mounts and arguments come back exactly.
    adopted: Mapping[str, Any] | None = None
    # runtime_config() of the image (Env, Entrypoint, Cmd, WorkingDir); None in records of an earlier kvbake
    image_config: Mapping[str, Any] | None = None
    # the reviewer's key that signed and attested the image, checked at deploy: {"key": file name, "fingerprint": sha256}
    signed_by: Mapping[str, str] | None = None

    @property
    def id(self) -> str:
        """Content identity of what runs (who and when do not change it)."""
        core = {"image": self.image, "layers": list(self.layers), "switches": dict(self.switches),
                "max_model_len": self.max_model_len, "launcher_args": list(self.launcher_args)}
        return sha256_hex(canonical_json(core))[:16]

    @property
    def kept_as(self) -> str | None:
        """The name the adopted container waits under while another release serves."""
        return self.adopted["kept_as"] if self.adopted else None

    def env(self) -> list[str]:
        """The switch set as NAME=VALUE, sorted: identical on every rank."""
        return [f"{name}={value}" for name, value in sorted(self.switches.items())]


def make_release(pushed: PushedImage, chosen: ChosenPreset, manifest: Manifest, reason: str, deployed_by: str) -> Release:
    """A new release: the pushed image with the chosen preset's runtime settings, who deploys it, when and why."""
    preset = chosen.preset
    return Release(
        image=pushed.pinned, config_digest=pushed.config_digest, layers=pushed.layers, labels=dict(pushed.labels),
        preset=preset.name, switches=dict(preset.switches), max_model_len=preset.max_model_len,
        launcher_args=preset.launcher_args, deployed_by=deployed_by,
        deployed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), reason=reason, override=chosen.override,
        runtime_sha256=preset_sha256(manifest, preset), image_config=pushed.image_config,
    )


def release_to_json(release: Release) -> str:
    data = asdict(release)
    data["id"] = release.id
    return json.dumps(data, sort_keys=True, indent=1) + "\n"


def release_from_json(text: str) -> Release:
    data: dict[str, Any] = json.loads(text)
    data.pop("id", None)
    data["layers"] = tuple(data["layers"])
    data["launcher_args"] = tuple(data["launcher_args"])
    return Release(**data)
