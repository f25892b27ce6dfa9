"""Preset rules, checked everywhere a preset is used: known name, declared values, requires, forbidden, status flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from kvbake.digests import canonical_json, sha256_hex
from kvbake.errors import PresetError
from kvbake.manifest import Manifest, Preset
from kvbake.secretscan import refuse_in_option
from kvbake.yaml_documents import did_you_mean
from kvbake.yaml_documents import control_character


@dataclass(frozen=True)
class ChosenPreset:
    """A preset that passed every rule, with the override reason when its status needed a flag."""

    preset: Preset
    override: str | None


def preset_sha256(manifest: Manifest, preset: Preset) -> str:
    """The identity of one preset as the manifest states it, with the drafter limit it is checked against: the runtime
    hash of a release. It changes when the preset changes, never with the image."""
    body = {"name": preset.name, "status": preset.status, "max_model_len": preset.max_model_len, "switches": dict(preset.switches),
            "note": preset.note, "prefix_block": preset.prefix_block, "launcher_args": list(preset.launcher_args),
            "drafter_max_positions": manifest.drafter_max_positions}
    return sha256_hex(canonical_json(body))


def switch_problems(manifest: Manifest, switches: Mapping[str, str]) -> list[str]:
    """Every rule a switch set breaks: forbidden, undeclared, value outside the allowed set, missing requirement."""
    problems = []
    for name, value in sorted(switches.items()):
        char = control_character(name) or control_character(value)
        if char:
            problems.append(f"{name!r} carries control character {char} in its name or value")
        elif name in manifest.forbidden:
            problems.append(f"{name} is forbidden ({manifest.forbidden[name]})")
        elif name not in manifest.switches:
            problems.append(f"{name} is not a declared switch{did_you_mean(name, list(manifest.switches))}")
        elif value not in manifest.switches[name].values:
            problems.append(f"{name}={value!r} is not allowed (allowed: {', '.join(manifest.switches[name].values)})")
    for name in sorted(switches):
        spec = manifest.switches.get(name)
        for needed in spec.requires if spec else ():
            if needed not in switches:
                problems.append(f"{name} requires {needed}")
    return problems


def field_problems(preset: Preset) -> list[str]:
    """The preset's written fields (note, launcher_args) that carry a control character."""
    fields = {"note": preset.note, **{f"launcher_args[{i}]": arg for i, arg in enumerate(preset.launcher_args)}}
    return [f"{field} contains control character {char}" for field, text in fields.items() if (char := control_character(text))]


def choose_preset(manifest: Manifest, name: str, allow_held: bool = False, allow_untested: bool = False,
                  reason: str | None = None) -> ChosenPreset:
    """The named preset, or a PresetError naming every rule it breaks and the fix."""
    if name not in manifest.presets:
        raise PresetError(f"unknown preset {name!r}{did_you_mean(name, list(manifest.presets))}",
                          f"choose one of: {', '.join(manifest.presets)}")
    check_reason(reason)
    preset = manifest.presets[name]
    problems = switch_problems(manifest, preset.switches) + field_problems(preset)
    if problems:
        raise PresetError(f"preset {name}: {'; '.join(problems)}", "fix the preset's switches in the manifest")
    if manifest.drafter_max_positions is not None and preset.max_model_len > manifest.drafter_max_positions:
        raise PresetError(f"preset {name}: max-model-len {preset.max_model_len} is above the remote drafter's limit {manifest.drafter_max_positions}",
                          f"serve the drafter longer on its host (restart its vllm serve with --max-model-len {preset.max_model_len}), "
                          f"then set drafter.max_positions: {preset.max_model_len} in the manifest and the deployment file; or choose a "
                          "shorter preset")
    return ChosenPreset(preset, _status_override(preset, allow_held, allow_untested, reason))


def check_reason(reason: str | None) -> None:
    """A --reason is written into release records, every node's state, the journal, configs and validation reports: one
    line without control characters (a PresetError), and nothing that looks like a credential (an IntegrityError, as
    every hit of the credential scan)."""
    char = control_character(reason) if reason else None
    if char:
        raise PresetError(f"--reason contains control character {char}", "give the reason on one line without control characters; it is recorded")
    refuse_in_option("--reason", reason, "the release records, every node's state, the journal, configs and reports",
                     "give the reason without the credential; nothing was written")


def _status_override(preset: Preset, allow_held: bool, allow_untested: bool, reason: str | None) -> str | None:
    flag = {"held": ("--allow-held", allow_held), "untested": ("--allow-untested", allow_untested)}.get(preset.status)
    if flag is None:
        return None
    option, given = flag
    if not given:
        raise PresetError(f"preset {preset.name} is {preset.status} ({preset.note})",
                          f"pass {option} with --reason TEXT to use it in a supervised window, or choose a validated preset")
    if not reason:
        raise PresetError(f"preset {preset.name} is {preset.status} and {option} needs a reason", "add --reason TEXT; it is recorded")
    return f"{option}: {reason}"
