"""The release record: the immutable meaning of a deploy (image, layers, labels, preset, switches, who, when, why)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from kvbake.digests import canonical_json, sha256_hex


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
    adopted: Mapping[str, str] | None = None

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
