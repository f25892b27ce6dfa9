"""The seed's bind-mounted overlay becomes the chain, by proof, in every serve shape on two real node engines: init reads
the files mounted over the source root on every rank, lock proves the chain's result equals them byte for byte (or
refuses naming the file that differs, writing nothing), `init --capture` bakes them without a chain, and the derived
image built and deep-verified from either holds exactly the mounted bytes; a module linked into the source root counts
by its target's bytes, and a file in a tmpfs under the source root is read through the serve."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml

from kvbake.bake.adapters.extract import Extractor
from kvbake.engines.adapters.client import Engine
from kvbake_rig.serve_shapes import CONTROL_LENGTH, SERVED, SHAPES, ShapePorts, multi_node_args, standin_serve
from kvbake_rig.serve_shapes import run as run_serve

from conftest import run
from serveshapes import (NODES, SOURCE_ROOT, STANDIN, chain_overlay, clear_nodes, donor_clone, serving_keys, shape_ports, start_shape,
                         wait_for_serves)
from shiprig import reset_nodes

pytestmark = [pytest.mark.docker, pytest.mark.field_engines_only, pytest.mark.once_on_containerd]


@pytest.fixture()
def pair(rig, shipped):
    reset_nodes(rig, shipped["repository"])
    yield
    clear_nodes(rig, tuple({name for _, names in SHAPES.values() for name in names.values()}))
    reset_nodes(rig, shipped["repository"])


def start(rig: dict, tmp_path: Path, shape: str, overlay: tuple[tuple[str, str], ...], ports: ShapePorts | None = None) -> ShapePorts:
    ports = dataclasses.replace(ports, overlay=overlay) if ports else shape_ports(tmp_path, overlay)
    start_shape(rig, shape, ports)
    wait_for_serves(rig, SHAPES[shape][1], serving_keys(shape))
    return ports


def init(capsys, rig: dict, shipped: dict, project: Path, *extra: str) -> dict:
    nodes = [f"--node={NODES[key]}={rig[key].host}" for key in NODES]
    code, out, err = run(capsys, "init", *nodes, "--template", str(shipped["manifest"]), "--out", str(project),
                         "--registry", rig["registry"].address, "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def baked_files(engine: Engine, image: str, paths: list[str]) -> dict[str, bytes]:
    """The chain's files as the derived image holds them, read from a never-started container."""
    with engine.created_container(image) as created:
        extractor = Extractor(engine, created, SOURCE_ROOT)
        return {path: extractor.file(path).data for path in paths}


def build_and_verify(capsys, engine: Engine, project: Path) -> str:
    manifest = str(project / "manifest.yaml")
    for argv in (("build",), ("verify", "--deep")):
        code, out, err = run(capsys, *argv, "--manifest", manifest, "--json")
        assert code == 0, f"{argv}: {err}"
    return json.loads(out)["image"]


# eugr's shape is walked by the capture test below; together the four shapes the issue names are each proven once.
@pytest.mark.parametrize("shape", ["main process", "ray cluster", "--rm wrapper"])
def test_the_mounted_overlay_is_proven_to_be_the_chain_and_the_image_holds_its_bytes(capsys, engine, rig, shipped, pair, tmp_path, shape):
    overlay = chain_overlay()
    ports = start(rig, tmp_path, shape, overlay)
    donor, revision = donor_clone(tmp_path / "donor")
    project = tmp_path / "project"
    found = init(capsys, rig, shipped, project, "--donor-revision", revision)
    mounted = {target[len(SOURCE_ROOT) + 1:]: Path(source).read_bytes() for source, target in overlay}
    assert {f["path"] for f in found["served"]} == set(mounted)
    assert all(f["how"].startswith("mounted from ") for f in found["served"])
    assert yaml.safe_load((project / "manifest.yaml").read_text())["base"]["source_root"] == SOURCE_ROOT
    code, out, err = run(capsys, "lock", "--manifest", str(project / "manifest.yaml"), "--donor", str(donor))
    assert code == 0, err
    assert f"proof: the baked image holds the bytes the serve runs: {len(mounted)} files, sha256 equal" in out.splitlines()
    check = ["config", "--check", "--manifest", str(project / "manifest.yaml"), "--deploy", str(project / "deploy.yaml")]
    code, out, err = run(capsys, *check)
    assert code == 0, err
    assert f"proof: the baked image holds the bytes the serve runs: {len(mounted)} files, sha256 equal" in out.splitlines()
    image = build_and_verify(capsys, engine, project)
    assert baked_files(engine, image, sorted(mounted)) == mounted, "the derived image holds the mounted bytes"
    if shape == "main process":  # a mounted file edited on the node after the lock: the check names it
        source = next(Path(source) for source, target in overlay if target.endswith("/kv_cache_interface.py"))
        edited = tmp_path / "edited.py"
        edited.write_bytes(source.read_bytes() + b"# edited on the node after review\n")
        clear_nodes(rig, tuple(SHAPES[shape][1].values()))
        start(rig, tmp_path, shape, tuple((str(edited) if s == str(source) else s, t) for s, t in overlay), ports)
        code, out, err = run(capsys, *check)
        assert code == 7 and "1 of 9 files differ (vllm/v1/kv_cache_interface.py)" in err, out + err
        assert "the chain's result differs from the served file" in err and len(err.strip().splitlines()) == 1, err


def test_a_mounted_file_that_differs_from_the_chain_is_named_and_lock_writes_nothing(capsys, engine, rig, shipped, pair, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(STANDIN / "overlay", edited)
    changed = edited / "vllm" / "v1" / "kv_cache_interface.py"
    changed.write_bytes(changed.read_bytes() + b"# edited on the node after review\n")
    start(rig, tmp_path, "main process", chain_overlay(edited))
    donor, revision = donor_clone(tmp_path / "donor")
    project = tmp_path / "project"
    init(capsys, rig, shipped, project, "--donor-revision", revision)
    patches_before = sorted(p.name for p in (project / "patches").glob("*")) if (project / "patches").exists() else []
    code, out, err = run(capsys, "lock", "--manifest", str(project / "manifest.yaml"), "--donor", str(donor))
    assert code == 7, out + err
    assert "1 of 9 files differ (vllm/v1/kv_cache_interface.py)" in err and len(err.strip().splitlines()) == 1, err
    assert not (project / "manifest.lock.json").exists() and not (project / "overlay").exists()
    assert (sorted(p.name for p in (project / "patches").glob("*")) if (project / "patches").exists() else []) == patches_before
    report = (project / ".kvbake" / "served" / "differences.diff").read_text()
    assert "-# edited on the node after review" in report

    # the operator means the reviewed chain to replace the node's edit: said once, with the diff kept beside the manifest
    reason = "the reviewed chain replaces the edit made on the node"
    code, out, err = run(capsys, "lock", "--manifest", str(project / "manifest.yaml"), "--donor", str(donor), "--code-change", reason)
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("proof: a stated code change: 1 of 9 files differ from the serve before kvbake"))
    assert f"reason: {reason}" in line and "(vllm/v1/kv_cache_interface.py)" in line
    (kept,) = (project / "code-changes").glob("*.diff")
    assert f"code-changes/{kept.name}" in line and "-# edited on the node after review" in kept.read_text()
    assert not (project / ".kvbake" / "served" / "differences.diff").exists()
    code, out, err = run(capsys, "config", "--check", "--manifest", str(project / "manifest.yaml"), "--deploy", str(project / "deploy.yaml"))
    assert code == 0 and "proof: a stated code change: vllm/v1/kv_cache_interface.py differ from what runs" in out, err
    code, out, err = run(capsys, "lock", "--manifest", str(project / "manifest.yaml"))  # said once: a later lock of this chain passes
    assert code == 0 and f"reason: {reason}" in out, err


def test_capture_bakes_the_served_bytes_without_a_chain(capsys, engine, rig, shipped, pair, tmp_path):
    overlay = chain_overlay()
    start(rig, tmp_path, "eugr cluster", overlay)
    project = tmp_path / "project"
    found = init(capsys, rig, shipped, project, "--capture")
    mounted = {target[len(SOURCE_ROOT) + 1:]: Path(source).read_bytes() for source, target in overlay}
    chain = yaml.safe_load((project / "manifest.yaml").read_text())["chain"]
    assert [entry["role"] for entry in chain] == ["captured"] * len(mounted)
    assert "manifest.yaml donor.revision" not in found["placeholders"]
    code, out, err = run(capsys, "lock", "--manifest", str(project / "manifest.yaml"))
    assert code == 0, err
    assert f"proof: the baked image holds the bytes the serve runs: {len(mounted)} files, sha256 equal" in out.splitlines()
    image = build_and_verify(capsys, engine, project)
    assert baked_files(engine, image, sorted(mounted)) == mounted


LINKED = "vllm/v1/core/sched/scheduler.py"  # a module of the image a hot patch links to a mod kept elsewhere in the container
MOD = b"# the hot-patched scheduler, kept outside the package\nLINKED_MOD = True\n"
WRITE = "import os, sys; os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True); open(sys.argv[1], 'wb').write(sys.argv[2].encode())"


def on_each_serve(rig: dict, shape: str, *argv: str) -> None:
    """Run one command in each node's serve container, as an operator's hot patch does."""
    for key, name in SHAPES[shape][1].items():
        rig[key].client().container.execute(name, list(argv))


def captured_and_proven(capsys, rig: dict, shipped: dict, project: Path, path: str, how: str) -> dict:
    """init --capture reads the seed's overlay and `path` (`how` it got there), and lock proves the chain it wrote."""
    found = init(capsys, rig, shipped, project, "--capture")
    served = {f["path"]: f for f in found["served"]}
    assert len(served) == len(chain_overlay()) + 1 and served[path]["how"] == how, found["served"]
    code, out, err = run(capsys, "lock", "--manifest", str(project / "manifest.yaml"))
    assert code == 0, err
    assert f"proof: the baked image holds the bytes the serve runs: {len(served)} files, sha256 equal" in out.splitlines()
    return served[path]


def test_a_module_linked_into_the_source_root_is_captured_by_its_targets_bytes_and_proven(capsys, engine, rig, shipped, pair, tmp_path):
    start(rig, tmp_path, "main process", chain_overlay())
    on_each_serve(rig, "main process", "python3", "-c", WRITE, "/workspace/mods/scheduler.py", MOD.decode())
    on_each_serve(rig, "main process", "ln", "-sf", "/workspace/mods/scheduler.py", f"{SOURCE_ROOT}/{LINKED}")
    project = tmp_path / "project"
    linked = captured_and_proven(capsys, rig, shipped, project, LINKED, "changed in the container's writable layer, "
                                 "a symbolic link to /workspace/mods/scheduler.py (its target's bytes)")
    assert linked["base_sha256"] is not None, "the link replaced the image's own module"
    image = build_and_verify(capsys, engine, project)
    assert baked_files(engine, image, [LINKED]) == {LINKED: MOD}, "the derived image holds the link's target at the link's path"


HOT = "vllm/hotfix"  # a folder the serve keeps in a tmpfs under the source root
HOT_FILE = b"# written into the tmpfs by the operator\nHOT = True\n"


def main_process_with_tmpfs(client, key: str, ports: ShapePorts) -> str:
    """The main-process shape with a tmpfs under the source root (docker run --tmpfs)."""
    command = standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *multi_node_args(key, ports))
    return run_serve(client, "vllm-serve", command, ports, restart="unless-stopped", tmpfs=[f"{SOURCE_ROOT}/{HOT}"])


def test_a_file_in_a_tmpfs_under_the_source_root_is_read_through_the_serve_and_proven(capsys, engine, rig, shipped, pair, tmp_path):
    ports = shape_ports(tmp_path, chain_overlay())
    for key in NODES:
        main_process_with_tmpfs(rig[key].client(), key, ports)
    wait_for_serves(rig, SHAPES["main process"][1], serving_keys("main process"))
    on_each_serve(rig, "main process", "python3", "-c", WRITE, f"{SOURCE_ROOT}/{HOT}/patch.py", HOT_FILE.decode())
    project = tmp_path / "project"
    captured_and_proven(capsys, rig, shipped, project, f"{HOT}/patch.py", f"in a tmpfs at {SOURCE_ROOT}/{HOT}")
    assert (project / ".kvbake" / "served" / "files" / HOT / "patch.py").read_bytes() == HOT_FILE


HIDDEN = "vllm/parser/engine"  # a folder of the image that a tmpfs hides; the stand-in serve never imports it


def test_a_tmpfs_over_a_folder_of_the_image_that_hides_its_files_is_refused_naming_them(capsys, engine, rig, shipped, pair, tmp_path):
    """The operator keeps one patched module of an image folder in a tmpfs over that folder: the serve runs without the
    folder's other files, which the baked image would hold. init names them and writes nothing."""
    ports = shape_ports(tmp_path, chain_overlay())
    command = standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args)
    for key in NODES:
        run_serve(rig[key].client(), "vllm-serve", [*command, *multi_node_args(key, ports)], ports, restart="unless-stopped",
                  tmpfs=[f"{SOURCE_ROOT}/{HIDDEN}"])
    wait_for_serves(rig, SHAPES["main process"][1], serving_keys("main process"))
    on_each_serve(rig, "main process", "python3", "-c", WRITE, f"{SOURCE_ROOT}/{HIDDEN}/adapters.py", HOT_FILE.decode())
    project = tmp_path / "project"
    nodes = [f"--node={NODES[key]}={rig[key].host}" for key in NODES]
    code, out, err = run(capsys, "init", *nodes, "--template", str(shipped["manifest"]), "--out", str(project),
                         "--registry", rig["registry"].address)
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert f"{SOURCE_ROOT}/{HIDDEN} hides {SOURCE_ROOT}/{HIDDEN}/__init__.py, " in err and f"{HIDDEN}/events.py" in err, err
    assert f"{HIDDEN}/adapters.py" not in err, "the file the tmpfs holds is not hidden"
    assert not project.exists(), "a refused init writes nothing"


MODE_CHANGED = "vllm/parser/engine/events.py"  # a module of the image the stand-in serve never imports


def test_a_module_made_executable_in_the_serve_is_refused_by_init_naming_both_modes(capsys, engine, rig, shipped, pair, tmp_path):
    """A `chmod +x` on an image's module in the running serve changes no byte, but the baked image would give the file
    the image's mode: a chain carries bytes, never a mode. init names the file with both modes and writes nothing."""
    start(rig, tmp_path, "main process", chain_overlay())
    on_each_serve(rig, "main process", "chmod", "0755", f"{SOURCE_ROOT}/{MODE_CHANGED}")
    project = tmp_path / "project"
    nodes = [f"--node={NODES[key]}={rig[key].host}" for key in NODES]
    code, out, err = run(capsys, "init", *nodes, "--template", str(shipped["manifest"]), "--out", str(project),
                         "--registry", rig["registry"].address)
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert f"serves {SOURCE_ROOT}/{MODE_CHANGED} (0755, the image's 0644) with another mode than its image" in err, err
    assert not project.exists(), "a refused init writes nothing"
