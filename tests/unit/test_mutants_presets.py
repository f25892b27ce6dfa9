"""Exact-value tests of presets.py that the mutation run showed were missing: the preset hash's fields and every rule's message."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvbake.digests import canonical_json, sha256_hex
from kvbake.errors import PresetError
from kvbake.manifest import Preset, Switch
from kvbake.serve.core.presets import ChosenPreset, choose_preset, field_problems, preset_sha256, switch_problems

SWITCHES = {
    "VLLM_A": Switch("VLLM_A", ("1",), (), "a"),
    "VLLM_B": Switch("VLLM_B", ("1", "2"), ("VLLM_A",), "b needs a"),
    "VLLM_C": Switch("VLLM_C", ("on",), ("VLLM_A", "VLLM_B"), "c needs a and b"),
}
FORBIDDEN = {"VLLM_BAD": "it corrupts the cache"}


def preset(name: str = "p", status: str = "validated", max_model_len: int = 1000, switches=None, note: str = "a note",
           prefix_block: int = 384, launcher_args: tuple[str, ...] = ("--x", "1")) -> Preset:
    return Preset(name, status, max_model_len, dict(switches or {}), note, prefix_block, launcher_args)


def manifest(*presets: Preset, drafter: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(switches=SWITCHES, forbidden=FORBIDDEN, presets={p.name: p for p in presets},
                           drafter_max_positions=drafter)


# --- preset_sha256 ----------------------------------------------------------------------------

def test_the_preset_hash_covers_exactly_the_named_fields() -> None:
    chosen = preset(switches={"VLLM_A": "1"})
    body = {"name": "p", "status": "validated", "max_model_len": 1000, "switches": {"VLLM_A": "1"}, "note": "a note",
            "prefix_block": 384, "launcher_args": ["--x", "1"], "drafter_max_positions": 4096}
    assert preset_sha256(manifest(chosen, drafter=4096), chosen) == sha256_hex(canonical_json(body))
    assert preset_sha256(manifest(chosen), chosen) == sha256_hex(canonical_json({**body, "drafter_max_positions": None}))


@pytest.mark.parametrize("changed", [
    preset(name="q"), preset(status="held"), preset(max_model_len=1001), preset(switches={"VLLM_A": "1"}),
    preset(note="another"), preset(prefix_block=16), preset(launcher_args=("--x", "2")), preset(launcher_args=()),
])
def test_every_field_changes_the_preset_hash(changed: Preset) -> None:
    assert preset_sha256(manifest(changed), changed) != preset_sha256(manifest(preset()), preset())


# --- switch_problems --------------------------------------------------------------------------

@pytest.mark.parametrize(("switches", "problems"), [
    ({}, []),
    ({"VLLM_A": "1"}, []),
    ({"VLLM_A": "1", "VLLM_B": "2"}, []),
    ({"VLLM_A": "1", "VLLM_B": "1", "VLLM_C": "on"}, []),
    ({"VLLM_BAD": "1"}, ["VLLM_BAD is forbidden (it corrupts the cache)"]),
    ({"VLLM_AA": "1"}, ["VLLM_AA is not a declared switch (did you mean 'VLLM_A'?)"]),
    ({"ZZZZ": "1"}, ["ZZZZ is not a declared switch"]),
    ({"VLLM_A": "2"}, ["VLLM_A='2' is not allowed (allowed: 1)"]),
    ({"VLLM_A": "1", "VLLM_B": "3"}, ["VLLM_B='3' is not allowed (allowed: 1, 2)"]),
    ({"VLLM_B": "1"}, ["VLLM_B requires VLLM_A"]),
    ({"VLLM_C": "on"}, ["VLLM_C requires VLLM_A", "VLLM_C requires VLLM_B"]),
    ({"VLLM_A": "1\n"}, ["'VLLM_A' carries control character U+000A in its name or value"]),
    ({"VLLM_\tA": "1"}, ["'VLLM_\\tA' carries control character U+0009 in its name or value"]),
    ({"VLLM_BAD": "1", "VLLM_C": "x", "VLLM_A": "2"}, [
        "VLLM_A='2' is not allowed (allowed: 1)", "VLLM_BAD is forbidden (it corrupts the cache)",
        "VLLM_C='x' is not allowed (allowed: on)", "VLLM_C requires VLLM_B"]),
])
def test_switch_problems_name_every_rule_broken_in_order(switches: dict[str, str], problems: list[str]) -> None:
    assert switch_problems(manifest(), switches) == problems


# --- field_problems ---------------------------------------------------------------------------

@pytest.mark.parametrize(("chosen", "problems"), [
    (preset(), []),
    (preset(note="line\nbreak"), ["note contains control character U+000A"]),
    (preset(launcher_args=("--ok", "bad\x07", "x\x1b")), [
        "launcher_args[1] contains control character U+0007", "launcher_args[2] contains control character U+001B"]),
    (preset(note="\x00", launcher_args=("\x7f",)), [
        "note contains control character U+0000", "launcher_args[0] contains control character U+007F"]),
])
def test_field_problems_name_each_field_with_a_control_character(chosen: Preset, problems: list[str]) -> None:
    assert field_problems(chosen) == problems


# --- choose_preset ----------------------------------------------------------------------------

def refusal(call) -> tuple[str, str | None]:
    with pytest.raises(PresetError) as caught:
        call()
    assert type(caught.value) is PresetError
    return caught.value.message, caught.value.fix


def test_a_validated_preset_is_chosen_without_override() -> None:
    chosen = preset(switches={"VLLM_A": "1"})
    assert choose_preset(manifest(chosen), "p") == ChosenPreset(chosen, None)
    assert choose_preset(manifest(chosen), "p", allow_held=True, allow_untested=True, reason="why") == ChosenPreset(chosen, None)


def test_an_unknown_preset_names_the_closest_and_every_choice() -> None:
    known = manifest(preset(name="longctx"), preset(name="packing"))
    assert refusal(lambda: choose_preset(known, "longct")) == (
        "unknown preset 'longct' (did you mean 'longctx'?)", "choose one of: longctx, packing")
    assert refusal(lambda: choose_preset(known, "zzz")) == ("unknown preset 'zzz'", "choose one of: longctx, packing")


def test_a_reason_with_a_control_character_is_refused() -> None:
    assert refusal(lambda: choose_preset(manifest(preset()), "p", reason="two\nlines")) == (
        "--reason contains control character U+000A",
        "give the reason on one line without control characters; it is recorded")


def test_every_switch_and_field_problem_is_named_together() -> None:
    broken = preset(switches={"VLLM_B": "1"}, note="x\ty")
    assert refusal(lambda: choose_preset(manifest(broken), "p")) == (
        "preset p: VLLM_B requires VLLM_A; note contains control character U+0009", "fix the preset's switches in the manifest")


@pytest.mark.parametrize(("drafter", "max_model_len", "refused"), [
    (None, 10**9, False), (1000, 1000, False), (1001, 1000, False), (999, 1000, True),
])
def test_the_drafter_limit_caps_max_model_len(drafter, max_model_len: int, refused: bool) -> None:
    chosen = preset(max_model_len=max_model_len)
    call = lambda: choose_preset(manifest(chosen, drafter=drafter), "p")  # noqa: E731
    if not refused:
        assert call() == ChosenPreset(chosen, None)
        return
    assert refusal(call) == (
        f"preset p: max-model-len {max_model_len} is above the remote drafter's limit {drafter}",
        f"serve the drafter longer on its host (restart its vllm serve with --max-model-len {max_model_len}), then set "
        f"drafter.max_positions: {max_model_len} in the manifest and the deployment file; or choose a shorter preset")


@pytest.mark.parametrize(("status", "option"), [("held", "--allow-held"), ("untested", "--allow-untested")])
def test_a_held_or_untested_preset_needs_its_flag_and_a_reason(status: str, option: str) -> None:
    chosen = preset(status=status, note="not proven")
    flags = {"allow_held": status == "held", "allow_untested": status == "untested"}
    other = {"allow_held": status != "held", "allow_untested": status != "untested"}
    known = manifest(chosen)
    assert refusal(lambda: choose_preset(known, "p")) == (
        f"preset p is {status} (not proven)", f"pass {option} with --reason TEXT to use it in a supervised window, or choose a validated preset")
    assert refusal(lambda: choose_preset(known, "p", reason="window", **other)) == (
        f"preset p is {status} (not proven)", f"pass {option} with --reason TEXT to use it in a supervised window, or choose a validated preset")
    for reason in (None, ""):
        assert refusal(lambda: choose_preset(known, "p", reason=reason, **flags)) == (
            f"preset p is {status} and {option} needs a reason", "add --reason TEXT; it is recorded")
    assert choose_preset(known, "p", reason="supervised window", **flags) == ChosenPreset(chosen, f"{option}: supervised window")


def test_an_unknown_status_needs_no_flag() -> None:
    chosen = preset(status="retired")
    assert choose_preset(manifest(chosen), "p") == ChosenPreset(chosen, None)
