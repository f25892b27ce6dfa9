"""The top-level manifest is the production DSV41 one: valid, unlocked, and refusing to build with the exact command."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.cli import main
from kvbake.manifest import load_manifest
from kvbake.serve.core.presets import choose_preset
from kvbake.errors import PresetError

ROOT = Path(__file__).resolve().parents[2]


def test_it_declares_the_seed_chain_switches_and_presets():
    manifest = load_manifest(ROOT / "manifest.yaml")
    assert manifest.base.image == "ghcr.io/henryous/deepseek-v41-1017-dgx-spark:v5" and manifest.base.platform == "linux/arm64"
    assert [p.id for p in manifest.chain] == ["0051", "0053", "0057", "0059", "0060", "0076"]
    assert manifest.patch("0059").role == "dependency" and manifest.patch("0059").needed_by == ("0060", "0076")
    assert manifest.switches["VLLM_EXL3_TF_PROMPT_ALIAS"].requires == ("VLLM_EXL3_TF_PROMPT_TRANSIENT",)
    assert {p.name: (p.status, p.max_model_len) for p in manifest.presets.values()} == {
        "control": ("validated", 163840), "packing-327680": ("validated", 327680),
        "longctx-524288": ("held", 524288), "longctx-1048576": ("untested", 1048576)}
    assert len(manifest.presets["packing-327680"].switches) == 5
    assert set(manifest.forbidden) == {"VLLM_DSV41_NVFP4_KV", "VLLM_DSV41_KV_DISPLAY"}


def test_building_it_unlocked_names_the_command_to_run(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main([]) == 4
    err = capsys.readouterr().err
    assert "manifest.yaml is not locked" in err and "python build.py lock" in err and "--donor" in err


def test_held_and_untested_presets_need_their_flag_and_a_reason():
    manifest = load_manifest(ROOT / "manifest.yaml")
    with pytest.raises(PresetError) as caught:
        choose_preset(manifest, "longctx-524288")
    assert caught.value.exit_code == 14
    assert "longctx-524288" in caught.value.message and "is held" in caught.value.message
    assert "--allow-held" in caught.value.fix and "--reason TEXT" in caught.value.fix
    chosen = choose_preset(manifest, "longctx-1048576", allow_untested=True, reason="supervised window")
    assert chosen.override == "--allow-untested: supervised window"


def test_only_the_base_repositorys_own_digest_is_pinned():
    from kvbake.bake.adapters.pinning import registry_digest_of

    digests = ["127.0.0.1:5000/other@sha256:" + "a" * 64, "ghcr.io/henryous/img@sha256:" + "b" * 64]
    assert registry_digest_of("ghcr.io/henryous/img:v5", digests, "classic") == "sha256:" + "b" * 64
    assert registry_digest_of("kvbake-standin/vllm-base:0.33.0", digests, "classic") is None


def test_on_the_containerd_store_only_a_reference_with_a_registry_host_pins_its_digest():
    from kvbake.bake.adapters.pinning import registry_digest_of

    loaded = ["kvbake-standin/vllm-base@sha256:" + "c" * 64]  # the containerd store lists a digest for loaded images too
    assert registry_digest_of("kvbake-standin/vllm-base:0.33.0", loaded, "containerd") is None
    assert registry_digest_of("kvbake-standin/vllm-base:0.33.0", loaded, "classic") == "sha256:" + "c" * 64
    pulled = ["127.0.0.1:5000/base@sha256:" + "d" * 64]
    assert registry_digest_of("127.0.0.1:5000/base:1", pulled, "containerd") == "sha256:" + "d" * 64
