"""The bake on the real stand-in base (Debian + Python 3.11 + vLLM 0.33.0 sources): reproducibility across engines,
deep verification of both builders, and proof that stale bytecode never wins."""

from __future__ import annotations

import json
import py_compile
import shutil
from pathlib import Path

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.errors import IntegrityError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.bake.core.plan import make_plan, read_overlay
from kvbake_rig import NodeEngine
from kvbake.bake.adapters.verifier import prove_bytecode

from conftest import run

pytestmark = [pytest.mark.docker, pytest.mark.every_engine]  # bake and push are proven on Docker 20.10 too
STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
BASE = "kvbake-standin/vllm-base:0.33.0"
MODULE = "vllm/v1/kv_cache_interface.py"


@pytest.fixture(scope="module")
def standin(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the stand-in example, locked against this machine's stand-in base."""
    assert engine.inspect_image(BASE) is not None, "build the base first: python scripts/standin_base.py"
    root = tmp_path_factory.mktemp("standin") / "standin"
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake", "Dockerfile.overlay"))
    from kvbake.cli import main

    assert main(["lock", "--manifest", str(root / "manifest.yaml"), "--rebase-base"]) == 0  # this machine's own base build
    return root / "manifest.yaml"


def build(capsys, manifest: Path, *extra: str) -> dict:
    code, out, err = run(capsys, "build", "--manifest", str(manifest), "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def test_two_builds_and_a_second_engine_give_one_image_id(capsys, engine, standin, tmp_path):
    first, second = build(capsys, standin), build(capsys, standin)
    assert first["image_id"] == second["image_id"]
    with NodeEngine(tmp_path / "other", name="other") as other:
        other.client().image.load(engine.client.image.save(BASE))
        third = build(capsys, standin, "--host", other.host)
        assert third["image_id"] == first["image_id"]
        assert Engine(other.host).inspect_image(third["image"])["RootFS"]["Layers"][-1] == first["layer_diff_id"]


def test_deep_verify_of_the_kvbake_builder(capsys, engine, standin):
    build(capsys, standin)
    code, out, err = run(capsys, "verify", "--deep", "--manifest", str(standin))
    assert code == 0, err
    assert "9 files read back" in out and "9 modules run their patched code" in out
    assert "offline proof: 9 modules, no cached bytecode or shadowing module can win" in out


def test_deep_verify_of_the_docker_builder(capsys, engine, standin):
    record = build(capsys, standin, "--builder", "docker")
    assert record["image"].endswith("-dockerbuild")
    code, out, err = run(capsys, "verify", "--deep", "--builder", "docker", "--manifest", str(standin))
    assert code == 0, err
    assert "9 modules run their patched code" in out
    inspect = engine.inspect_image(record["image"])
    assert inspect["Config"]["Labels"]["org.kvbake.chain"].startswith("0051:")
    assert not {"VLLM_DSV41_KV_PAIR", "VLLM_DSV41_NVFP4_KV"} & {e.split("=")[0] for e in inspect["Config"]["Env"]}


def test_the_base_bytecode_is_gone_and_would_otherwise_win(capsys, engine, standin, tmp_path):
    """The base's .pyc of a patched module is whited out; an unchecked-hash .pyc of the old source, which Python
    would run without looking at the source, makes the bytecode proof fail."""
    image = build(capsys, standin)["image"]
    manifest = load_manifest(standin)
    lock = read_lock(manifest)
    assert any(p.endswith("kv_cache_interface.cpython-311.pyc") for p in lock.file(MODULE).stale_bytecode)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    assert prove_bytecode(engine, image, lock) == (9, True)

    original = tmp_path / "kv_cache_interface.py"
    with engine.created_container(BASE) as container:
        assert engine.copy_out(container, f"{lock.source_root}/{MODULE}", original)
    context = tmp_path / "ctx"
    context.mkdir()
    py_compile.compile(str(original), cfile=str(context / "stale.pyc"), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    target = f"{lock.source_root}/vllm/v1/__pycache__/kv_cache_interface.cpython-311.pyc"
    (context / "Dockerfile").write_text(f"FROM {image}\nCOPY stale.pyc {target}\n")
    poisoned = "kvbake-test/stale-bytecode:1"
    engine.legacy_build(context, context / "Dockerfile", poisoned)  # the classic builder, as buildx may be installed
    try:
        with pytest.raises(IntegrityError, match="kv_cache_interface.py: the code Python would run is not the patched source"):
            prove_bytecode(engine, poisoned, lock)
        assert plan.image_id != engine.inspect_image(poisoned)["Id"]
    finally:
        engine.remove_image(poisoned)
