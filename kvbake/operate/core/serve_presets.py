"""Pure: which of the manifest's presets a running vLLM serve equals (switch set, length and the preset's arguments)."""

from __future__ import annotations

from typing import Mapping, Sequence

from kvbake.manifest import Preset
from kvbake.serve.core.serve_description import LENGTH_OPTION, shared_args
from kvbake.serve.core.vllm_argv import ServeArgs, parse_serve_args


def served_length(args: ServeArgs, api_length: int | None) -> str | None:
    """The length a serve runs: its --max-model-len, else what its /v1/models said (`api_length`: vLLM's own choice)."""
    given = args.value(LENGTH_OPTION)
    return given if given else (str(api_length) if api_length else None)


def preset_differences(args: ServeArgs, switches: Mapping[str, str], preset: Preset, api_length: int | None = None) -> list[str]:
    """How a serve differs from a preset as kvbake would start it; empty when it is that preset. A serve started
    without --max-model-len runs the length its API names (`api_length`), which init wrote into control."""
    differences = []
    if dict(switches) != dict(preset.switches):
        differences.append(f"switches {dict(switches) or '{}'} (the preset: {dict(preset.switches) or '{}'})")
    length = served_length(args, api_length)
    if length != str(preset.max_model_len):
        shown = f"--max-model-len {length}" if args.value(LENGTH_OPTION) else f"no --max-model-len, serving {length or 'an unknown length'}"
        differences.append(f"{shown} (the preset: {preset.max_model_len})")
    served = sorted(shared_args(args).entries)
    stated = sorted(shared_args(parse_serve_args(["model", *preset.launcher_args])).entries)
    for name, values in sorted(set(served) ^ set(stated)):
        where = "the serve" if (name, values) in served else "the preset"
        differences.append(f"{' '.join((name, *values))} only in {where}")
    return differences


def presets_served(args: ServeArgs, switches: Mapping[str, str], presets: Mapping[str, Preset], api_length: int | None = None) -> list[str]:
    """The presets the serve equals, in the manifest's order."""
    return [name for name, preset in presets.items() if not preset_differences(args, switches, preset, api_length)]


def nearest(args: ServeArgs, switches: Mapping[str, str], presets: Mapping[str, Preset], first: Sequence[str] = ("control",),
            api_length: int | None = None) -> tuple[str, list[str]]:
    """The preset with the fewest differences (control first among equals) and those differences."""
    order = [name for name in first if name in presets] + [name for name in presets if name not in first]
    scored = [(len(preset_differences(args, switches, presets[name], api_length)), name) for name in order]
    best = min(scored, key=lambda pair: pair[0])[1]
    return best, preset_differences(args, switches, presets[best], api_length)
