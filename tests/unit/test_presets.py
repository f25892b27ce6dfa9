"""Preset rules: unknown name, forbidden switch, undeclared switch, value outside the set, requires, status flags, drafter."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from kvbake.errors import PresetError
from kvbake.manifest import load_manifest
from kvbake.operate.core.presets import choose_preset

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"


def manifest_with(tmp_path: Path, switches: dict[str, str], drafter: int | None = None, max_len: int = 327680):
    shutil.copytree(STANDIN / "patches", tmp_path / "patches")
    document = yaml.safe_load((STANDIN / "manifest.yaml").read_text())
    document["presets"]["trial"] = {"status": "validated", "max_model_len": max_len, "switches": switches, "note": "test"}
    if drafter:
        document["drafter"] = {"max_positions": drafter}
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(document))
    return load_manifest(tmp_path / "manifest.yaml")


@pytest.mark.parametrize("switches,fragment", [
    ({"VLLM_DSV41_NVFP4_KV": "1"},
     "VLLM_DSV41_NVFP4_KV is forbidden (NVFP4 KV stays disabled; its code ships only because 0060 and 0076 depend on 0059)"),
    ({"VLLM_EXL3_TF_PROMPT_ALIAS": "1"}, "VLLM_EXL3_TF_PROMPT_ALIAS requires VLLM_EXL3_TF_PROMPT_TRANSIENT"),
    ({"VLLM_DSV41_KV_PAIR": "2"}, "VLLM_DSV41_KV_PAIR='2' is not allowed (allowed: 3)"),
    ({"VLLM_DSV41_KV_PAIRS": "3"}, "VLLM_DSV41_KV_PAIRS is not a declared switch (did you mean 'VLLM_DSV41_KV_PAIR'?)"),
])
def test_a_preset_breaking_a_switch_rule_is_refused(tmp_path, switches, fragment):
    manifest = manifest_with(tmp_path, switches)
    with pytest.raises(PresetError, match=rf"^preset trial: {re.escape(fragment)}; fix: fix the preset's switches in the manifest$") as caught:
        choose_preset(manifest, "trial")
    assert caught.value.exit_code == 14


def test_an_unknown_preset_suggests_the_closest(tmp_path):
    manifest = manifest_with(tmp_path, {})
    with pytest.raises(PresetError, match="unknown preset 'packing-32768' \\(did you mean 'packing-327680'\\?\\)"):
        choose_preset(manifest, "packing-32768")


def test_a_context_limit_above_the_drafter_is_refused(tmp_path):
    manifest = manifest_with(tmp_path, {}, drafter=262144)
    with pytest.raises(PresetError, match=r"^preset trial: max-model-len 327680 is above the remote drafter's limit 262144; "
                                          r"fix: raise drafter\.max_positions only after the drafter serves that range"):
        choose_preset(manifest, "trial")


def test_statuses_need_flags_and_reasons(tmp_path):
    manifest = manifest_with(tmp_path, {})
    with pytest.raises(PresetError, match=r"^preset longctx-524288 is held \(held: cold single-stream prefill .*\); "
                                          r"fix: pass --allow-held with --reason TEXT to use it in a supervised window"):
        choose_preset(manifest, "longctx-524288")
    with pytest.raises(PresetError, match=r"^preset longctx-524288 is held and --allow-held needs a reason; fix: add --reason TEXT; it is recorded$"):
        choose_preset(manifest, "longctx-524288", allow_held=True)
    assert choose_preset(manifest, "longctx-524288", allow_held=True, reason="prefill study").override == "--allow-held: prefill study"
    assert choose_preset(manifest, "packing-327680").override is None


def test_a_reason_with_a_control_character_is_refused(tmp_path):
    manifest = manifest_with(tmp_path, {})
    with pytest.raises(PresetError) as caught:
        choose_preset(manifest, "longctx-524288", allow_held=True, reason="study\nINJECTED=1")
    assert caught.value.exit_code == 14
    assert "--reason contains control character U+000A" in caught.value.one_line()


@pytest.mark.parametrize("switches,note,args,fragment", [
    ({"VLLM_DSV41_KV_PAIR": "3\n"}, "n", (), "'VLLM_DSV41_KV_PAIR' carries control character U+000A in its name or value"),
    ({}, "two\nlines", (), "note contains control character U+000A"),
    ({}, "n", ("--ok", "--x\x1b"), "launcher_args[1] contains control character U+001B"),
])
def test_a_preset_value_built_in_code_with_a_control_character_is_refused(tmp_path, switches, note, args, fragment):
    import dataclasses

    manifest = manifest_with(tmp_path, {})
    trial = dataclasses.replace(manifest.presets["trial"], switches=switches, note=note, launcher_args=args)
    manifest = dataclasses.replace(manifest, presets={**manifest.presets, "trial": trial})
    with pytest.raises(PresetError, match=rf"^preset trial: {re.escape(fragment)}; fix: fix the preset's switches in the manifest$") as caught:
        choose_preset(manifest, "trial")
    assert caught.value.exit_code == 14


def test_a_manifest_preset_note_with_a_newline_is_refused_at_load(tmp_path):
    from kvbake.errors import ManifestError

    shutil.copytree(STANDIN / "patches", tmp_path / "patches")
    document = yaml.safe_load((STANDIN / "manifest.yaml").read_text())
    document["presets"]["control"]["note"] = "line one\nline two"
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(document))
    with pytest.raises(ManifestError, match=r"presets\.control\.note contains control character U\+000A") as caught:
        load_manifest(tmp_path / "manifest.yaml")
    assert caught.value.exit_code == 3
