"""An arm64 base on an amd64 host, with no emulation: lock, build and deep verify work, and the bytecode proof is
made offline from the pyc headers because this engine cannot run the image's interpreter."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.bake.adapters.verifier import engine_can_run

from conftest import run

pytestmark = pytest.mark.docker
STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
ARM64_BASE = "kvbake-standin/vllm-base:0.33.0-arm64"


@pytest.fixture(scope="module")
def arm64_standin(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert engine.inspect_image(ARM64_BASE) is not None, "build it first: python scripts/standin_base_arm64.py"
    root = tmp_path_factory.mktemp("arm64") / "standin"
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake", "Dockerfile.overlay"))
    manifest = root / "manifest.yaml"
    text = manifest.read_text().replace("image: kvbake-standin/vllm-base:0.33.0", f"image: {ARM64_BASE}")
    manifest.write_text(text.replace("platform: native ", "platform: linux/arm64"))
    from kvbake.cli import main

    assert main(["lock", "--manifest", str(manifest)]) == 0
    return manifest


def test_the_host_cannot_run_the_arm64_image(engine):
    assert engine.inspect_image(ARM64_BASE)["Architecture"] == "arm64"
    if engine_can_run(engine, "linux/arm64"):
        pytest.fail("this test needs a host that cannot run arm64 images (no emulation registered)")


def test_lock_build_and_deep_verify_of_an_arm64_base(capsys, engine, arm64_standin):
    lock = json.loads(arm64_standin.with_name("manifest.lock.json").read_text())
    assert lock["base"]["platform"] == "linux/arm64"
    code, out, err = run(capsys, "build", "--manifest", str(arm64_standin), "--json")
    assert code == 0, err
    built = json.loads(out)
    assert built["config_digest"] == lock["derived"]["image_id"]
    assert engine.inspect_image(built["image"])["Architecture"] == "arm64"
    code, out, err = run(capsys, "verify", "--deep", "--manifest", str(arm64_standin))
    assert code == 0, err
    assert "9 files read back" in out and "offline proof: 9 modules, no cached bytecode or shadowing module can win" in out
    assert "interpreter proof skipped: the image is linux/arm64 and this engine cannot run it" in out
    assert "exec format error" not in out + err


def test_an_unchecked_pyc_planted_in_an_arm64_image_fails_the_offline_proof(capsys, engine, arm64_standin, tmp_path):
    """A pyc Python would run without looking at the source, added on top of the built image, is named offline."""
    import importlib.util
    import struct

    code, out, err = run(capsys, "build", "--manifest", str(arm64_standin), "--json")
    assert code == 0, err
    image = json.loads(out)["image"]
    pyc = importlib.util.MAGIC_NUMBER + struct.pack("<I", 0b01) + b"\0" * 8 + b"garbage"
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "mod.pyc").write_bytes(pyc)
    target = "/usr/local/lib/python3.11/dist-packages/vllm/v1/__pycache__/kv_cache_interface.cpython-311.pyc"
    (context / "Dockerfile").write_text(f"FROM {engine.inspect_image(image)['Id']}\nCOPY mod.pyc {target}\n")
    poisoned = "kvbake-test/arm64-poisoned:1"
    engine.legacy_build(context, context / "Dockerfile", poisoned)
    try:
        code, _, err = run(capsys, "verify", poisoned, "--deep", "--builder", "docker", "--manifest", str(arm64_standin))
        assert code == 7 and "kv_cache_interface.cpython-311.pyc is an unchecked-hash pyc" in err, err
        assert "stale bytecode vllm/v1/__pycache__/kv_cache_interface.cpython-311.pyc is still in the image" in err, err
    finally:
        engine.untag(poisoned)
