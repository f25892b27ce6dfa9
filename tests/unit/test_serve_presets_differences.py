"""Which preset a running serve equals: every difference named exactly, and the nearest preset with control first among equals."""

from __future__ import annotations

from kvbake.manifest import Preset
from kvbake.operate.core.serve_presets import nearest, preset_differences, presets_served
from kvbake.serve.core.vllm_argv import parse_serve_args

ARGS = ("--port", "8000", "--kv-cache-dtype", "fp8")


def preset(name: str, switches: dict[str, str] | None = None, length: int = 4096, args: tuple[str, ...] = ARGS) -> Preset:
    return Preset(name, "validated", length, switches or {}, "n", 16, args)


def serve(*argv: str, length: str = "4096"):
    return parse_serve_args(["/models/m", "--max-model-len", length, *argv])


def test_a_serve_that_is_the_preset_has_no_difference() -> None:
    assert preset_differences(serve(*ARGS), {}, preset("control")) == []
    assert preset_differences(serve(*ARGS), {"A": "1"}, preset("p", {"A": "1"})) == []


def test_switches_are_named_with_both_sets() -> None:
    assert preset_differences(serve(*ARGS), {"A": "1"}, preset("control")) == ["switches {'A': '1'} (the preset: {})"]
    assert preset_differences(serve(*ARGS), {}, preset("p", {"A": "1"})) == ["switches {} (the preset: {'A': '1'})"]


def test_the_length_is_named_with_both_values() -> None:
    assert preset_differences(serve(*ARGS, length="2048"), {}, preset("control")) == ["--max-model-len 2048 (the preset: 4096)"]


def test_an_option_on_one_side_only_is_named_with_its_side() -> None:
    assert preset_differences(serve(*ARGS, "--enforce-eager"), {}, preset("control")) == ["--enforce-eager only in the serve"]
    assert preset_differences(serve("--port", "8000"), {}, preset("control")) == ["--kv-cache-dtype fp8 only in the preset"]


def test_a_changed_value_is_named_on_both_sides_in_order() -> None:
    differences = preset_differences(serve("--port", "9000", "--kv-cache-dtype", "fp8"), {}, preset("control"))
    assert differences == ["--port 8000 only in the preset", "--port 9000 only in the serve"]


def test_every_kind_of_difference_is_listed_switches_then_length_then_options() -> None:
    differences = preset_differences(serve("--port", "8000", length="1024"), {"A": "1"}, preset("control"))
    assert [d.split(" ", 1)[0] for d in differences] == ["switches", "--max-model-len", "--kv-cache-dtype"]


def test_the_presets_served_keep_the_manifests_order() -> None:
    presets = {"b": preset("b"), "other": preset("other", {"A": "1"}), "a": preset("a")}
    assert presets_served(serve(*ARGS), {}, presets) == ["b", "a"]
    assert presets_served(serve(*ARGS), {"Z": "1"}, presets) == []


def test_nearest_is_the_preset_with_fewest_differences() -> None:
    presets = {"control": preset("control"), "packing": preset("packing", {"A": "1"}, length=8192)}
    assert nearest(serve(*ARGS, length="8192"), {"A": "1"}, presets) == ("packing", [])
    name, differences = nearest(serve(*ARGS, length="8192"), {}, presets)
    assert name == "control" and differences == ["--max-model-len 8192 (the preset: 4096)"]


def test_control_comes_first_among_equally_near_presets_wherever_it_is_listed() -> None:
    presets = {"zeta": preset("zeta", {"A": "1"}), "control": preset("control", {"A": "2"})}
    assert nearest(serve(*ARGS), {"A": "3"}, presets)[0] == "control"
    assert nearest(serve(*ARGS), {"A": "3"}, presets, first=())[0] == "zeta"
    assert nearest(serve(*ARGS), {"A": "3"}, presets, first=("zeta",))[0] == "zeta"
    assert nearest(serve(*ARGS), {"A": "3"}, {"x": preset("x", {"A": "1"})})[0] == "x", "no control: the manifest's order"


def test_a_serve_without_max_model_len_runs_the_length_its_api_names() -> None:
    """init wrote control's length from /v1/models for a serve started without --max-model-len: config --check asks the
    same API and finds control, and names the length it serves when another preset is wanted."""
    unset = parse_serve_args(["/models/m", *ARGS])
    assert preset_differences(unset, {}, preset("control", length=8192), api_length=8192) == []
    assert presets_served(unset, {}, {"control": preset("control", length=8192)}, api_length=8192) == ["control"]
    assert preset_differences(unset, {}, preset("control"), api_length=8192) == ["no --max-model-len, serving 8192 (the preset: 4096)"]
    assert preset_differences(unset, {}, preset("control")) == ["no --max-model-len, serving an unknown length (the preset: 4096)"]
    assert preset_differences(serve(*ARGS), {}, preset("control"), api_length=8192) == [], "a given --max-model-len wins"
