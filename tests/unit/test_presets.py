"""Preset rules: unknown name, forbidden switch, undeclared switch, value outside the set, requires, status flags, drafter."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kvbake.errors import PresetError
from kvbake.manifest import load_manifest
from kvbake.serve.core.presets import choose_preset

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"


def manifest_with(tmp_path: Path, switches: dict[str, str], drafter: int | None = None, max_len: int = 327680):
    shutil.copytree(STANDIN / "patches", tmp_path / "patches")
    document = yaml.safe_load((STANDIN / "manifest.yaml").read_text())
    document["presets"]["trial"] = {"status": "validated", "max_model_len": max_len, "switches": switches, "note": "test"}
    if drafter:
        document["drafter"] = {"max_positions": drafter}
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(document))
    return load_manifest(tmp_path / "manifest.yaml")


@pytest.mark.parametrize("switches,named", [
    ({"VLLM_DSV41_NVFP4_KV": "1"}, ("VLLM_DSV41_NVFP4_KV", "forbidden")),
    ({"VLLM_EXL3_TF_PROMPT_ALIAS": "1"}, ("VLLM_EXL3_TF_PROMPT_ALIAS", "requires VLLM_EXL3_TF_PROMPT_TRANSIENT")),
    ({"VLLM_DSV41_KV_PAIR": "2"}, ("VLLM_DSV41_KV_PAIR='2'", "allowed: 3")),
    ({"VLLM_DSV41_KV_PAIRS": "3"}, ("VLLM_DSV41_KV_PAIRS", "not a declared switch", "'VLLM_DSV41_KV_PAIR'")),
])
def test_a_preset_breaking_a_switch_rule_is_refused(tmp_path, switches, named):
    manifest = manifest_with(tmp_path, switches)
    with pytest.raises(PresetError) as caught:
        choose_preset(manifest, "trial")
    assert caught.value.exit_code == 14
    assert caught.value.message.startswith("preset trial: ")
    assert all(field in caught.value.message for field in named), caught.value.message
    assert "switches" in caught.value.fix and "manifest" in caught.value.fix


def test_an_unknown_preset_suggests_the_closest(tmp_path):
    manifest = manifest_with(tmp_path, {})
    with pytest.raises(PresetError, match="unknown preset 'packing-32768' \\(did you mean 'packing-327680'\\?\\)"):
        choose_preset(manifest, "packing-32768")


def test_a_context_limit_above_the_drafter_is_refused(tmp_path):
    manifest = manifest_with(tmp_path, {}, drafter=262144)
    with pytest.raises(PresetError) as caught:
        choose_preset(manifest, "trial")
    assert caught.value.exit_code == 14
    assert all(field in caught.value.message for field in ("preset trial", "max-model-len 327680", "drafter", "262144"))
    assert "drafter.max_positions" in caught.value.fix


def test_statuses_need_flags_and_reasons(tmp_path):
    manifest = manifest_with(tmp_path, {})
    with pytest.raises(PresetError) as held:
        choose_preset(manifest, "longctx-524288")
    assert held.value.exit_code == 14
    assert all(field in held.value.message for field in ("longctx-524288", "is held", "cold single-stream prefill"))
    assert "--allow-held" in held.value.fix and "--reason TEXT" in held.value.fix
    with pytest.raises(PresetError) as no_reason:
        choose_preset(manifest, "longctx-524288", allow_held=True)
    assert no_reason.value.exit_code == 14
    assert all(field in no_reason.value.message for field in ("longctx-524288", "--allow-held", "reason"))
    assert "--reason TEXT" in no_reason.value.fix
    assert choose_preset(manifest, "longctx-524288", allow_held=True, reason="prefill study").override == "--allow-held: prefill study"
    assert choose_preset(manifest, "packing-327680").override is None


def test_a_reason_with_a_control_character_is_refused(tmp_path):
    manifest = manifest_with(tmp_path, {})
    with pytest.raises(PresetError) as caught:
        choose_preset(manifest, "longctx-524288", allow_held=True, reason="study\nINJECTED=1")
    assert caught.value.exit_code == 14
    assert "--reason contains control character U+000A" in caught.value.one_line()


@pytest.mark.parametrize("switches,note,args,named", [
    ({"VLLM_DSV41_KV_PAIR": "3\n"}, "n", (), ("'VLLM_DSV41_KV_PAIR'", "U+000A")),
    ({}, "two\nlines", (), ("note", "U+000A")),
    ({}, "n", ("--ok", "--x\x1b"), ("launcher_args[1]", "U+001B")),
])
def test_a_preset_value_built_in_code_with_a_control_character_is_refused(tmp_path, switches, note, args, named):
    import dataclasses

    manifest = manifest_with(tmp_path, {})
    trial = dataclasses.replace(manifest.presets["trial"], switches=switches, note=note, launcher_args=args)
    manifest = dataclasses.replace(manifest, presets={**manifest.presets, "trial": trial})
    with pytest.raises(PresetError) as caught:
        choose_preset(manifest, "trial")
    assert caught.value.exit_code == 14
    assert caught.value.message.startswith("preset trial: ") and "control character" in caught.value.message
    assert all(field in caught.value.message for field in named), caught.value.message
    assert "switches" in caught.value.fix and "manifest" in caught.value.fix


def test_a_manifest_preset_note_with_a_newline_is_refused_at_load(tmp_path):
    from kvbake.errors import ManifestError

    shutil.copytree(STANDIN / "patches", tmp_path / "patches")
    document = yaml.safe_load((STANDIN / "manifest.yaml").read_text())
    document["presets"]["control"]["note"] = "line one\nline two"
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(document))
    with pytest.raises(ManifestError, match=r"presets\.control\.note contains control character U\+000A") as caught:
        load_manifest(tmp_path / "manifest.yaml")
    assert caught.value.exit_code == 3
