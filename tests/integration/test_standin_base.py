"""The stand-in base image has its two layers and pinned sources, and the stand-in chain applies to them strictly."""

from __future__ import annotations

import importlib.util
import os
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from python_on_whales import DockerClient
from unidiff import PatchSet

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "scripts" / "standin_base.py"
EXAMPLE = REPO / "examples" / "standin"
PATCHES = sorted((EXAMPLE / "patches").glob("*.patch"))
pytestmark = [pytest.mark.docker, pytest.mark.default_engine_only]  # the stand-in base as the default engine built it

CACHE_DIR = Path(os.environ.get("KVBAKE_STANDIN_CACHE", "~/.cache/kvbake/standin")).expanduser()


def load_script(name: str) -> ModuleType:
    """Import a module from scripts/ by path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


builder = load_script("standin_base")
lib = sys.modules["standin_lib"]


@pytest.fixture(scope="session")
def docker() -> DockerClient:
    return DockerClient()


@pytest.fixture(scope="session")
def base_tag(docker: DockerClient) -> str:
    """The stand-in base, built once (the builder returns at once when the tag exists)."""
    result = subprocess.run(
        [sys.executable, str(BUILDER), "--cache-dir", str(CACHE_DIR)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert docker.image.exists(lib.DEFAULT_TAG)
    return lib.DEFAULT_TAG


@pytest.fixture(scope="session")
def wheel(base_tag: str) -> Iterator[zipfile.ZipFile]:
    """The pinned wheel from the builder's cache, fetched again if the cache was emptied."""
    path = builder.fetch_wheel(CACHE_DIR, lib.wheel_pin(lib.host_arch()))
    with zipfile.ZipFile(path) as opened:
        yield opened


@pytest.fixture(scope="session")
def package_wheel(base_tag: str) -> Iterator[zipfile.ZipFile]:
    """The pinned exllamav3 wheel (the chain's second package) from the builder's cache."""
    with zipfile.ZipFile(builder.fetch_package_wheel(CACHE_DIR)) as opened:
        yield opened


@pytest.fixture()
def image_file(docker: DockerClient, base_tag: str, tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Copy one file out of a created, never started, container of the base."""
    container = docker.container.create(base_tag, networks=["none"], pull="never")

    def copy(relative: str) -> Path:
        target = tmp_path / Path(relative).name
        docker.container.copy((container, f"{lib.SOURCE_ROOT}/{relative}"), target)
        return target

    yield copy
    docker.container.remove(container)


def chain_files(patch: Path) -> list[tuple[str, bool]]:
    """(path, created by this patch) for every file a patch touches."""
    return [(item.path, item.is_added_file) for item in PatchSet.from_filename(str(patch))]


def git_apply(tree: Path, patch: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """git apply -p1 in tree, isolated from any user config or enclosing repository."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tree),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CEILING_DIRECTORIES": str(tree.parent),
        "LC_ALL": "C",
    }
    return subprocess.run(
        ["git", "apply", "-p1", "-v", "--whitespace=nowarn", *flags, str(patch)],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )


def base_tree(wheel: zipfile.ZipFile, dest: Path, package_wheel: zipfile.ZipFile) -> Path:
    """The chain's pre-existing files, extracted from the two wheels (not the image)."""
    touched = {path for patch in PATCHES for path, created in chain_files(patch) if not created}
    created = {path for patch in PATCHES for path, is_new in chain_files(patch) if is_new}
    wanted = sorted(touched - created)
    lib.extract_members(wheel, [p for p in wanted if p.startswith("vllm/")], dest)
    lib.extract_members(package_wheel, [p for p in wanted if p.startswith(f"{lib.EXLLAMAV3.name}/")], dest)
    assert all(p.startswith(("vllm/", f"{lib.EXLLAMAV3.name}/")) for p in wanted), wanted
    return dest


def assert_strict(result: subprocess.CompletedProcess[str], patch: Path) -> None:
    output = (result.stdout + result.stderr).lower()
    assert result.returncode == 0, f"{patch.name}: {result.stderr}"
    for word in ("offset", "fuzz", "skipped patch"):
        assert word not in output, f"{patch.name}: {word!r} in {output}"


def test_base_has_os_and_sources_layers(docker: DockerClient, base_tag: str) -> None:
    image = docker.image.inspect(base_tag)
    assert len(image.root_fs.layers) >= 2
    assert image.config.labels[lib.STANDIN_LABEL] == "true"
    assert image.config.labels[f"{lib.STANDIN_LABEL}.py-tree-sha256"] == lib.PY_TREE_SHA256
    assert image.config.labels[f"{lib.STANDIN_LABEL}.exllamav3-tree-sha256"] == lib.EXLLAMAV3.tree_sha256
    assert image.config.labels[f"{lib.STANDIN_LABEL}.recipe"] == lib.recipe(lib.VLLM_VERSION)
    assert image.config.cmd == ["python3"]
    assert any(entry.startswith("PATH=") for entry in image.config.env)


def test_kv_cache_interface_is_pinned_and_compiled(image_file: Callable[[str], Path]) -> None:
    relative = "vllm/v1/kv_cache_interface.py"
    source = image_file(relative)
    assert lib.file_sha256(source) == lib.BASE_FILE_SHA256[relative]
    pyc = image_file("vllm/v1/__pycache__/kv_cache_interface.cpython-311.pyc")
    header = pyc.read_bytes()[:16]
    flags, mtime, size = struct.unpack("<3I", header[4:16])
    assert header[:4] == importlib.util.MAGIC_NUMBER  # the host runs Python 3.11 too
    assert (flags, size) == (0, source.stat().st_size)
    assert mtime == int(source.stat().st_mtime)


def test_wheel_tree_matches_pin(wheel: zipfile.ZipFile, package_wheel: zipfile.ZipFile) -> None:
    assert lib.tree_sha256(wheel) == (lib.PY_TREE_SHA256, lib.PY_FILE_COUNT)
    assert lib.tree_sha256(package_wheel, lib.EXLLAMAV3.name) == (lib.EXLLAMAV3.tree_sha256, lib.EXLLAMAV3.file_count) == (
        lib.EXLLAMAV3.tree_sha256, 265)


def test_the_second_package_is_in_the_base_compiled(image_file: Callable[[str], Path]) -> None:
    source = image_file("exllamav3/util/tensor.py")
    pyc = image_file("exllamav3/util/__pycache__/tensor.cpython-311.pyc")
    flags, mtime, size = struct.unpack("<3I", pyc.read_bytes()[4:16])
    assert (flags, size, mtime) == (0, source.stat().st_size, int(source.stat().st_mtime))


def test_chain_applies_strictly_and_compiles(wheel: zipfile.ZipFile, package_wheel: zipfile.ZipFile, tmp_path: Path) -> None:
    tree = base_tree(wheel, tmp_path / "tree", package_wheel)
    for patch in PATCHES:
        assert_strict(git_apply(tree, patch, "--check"), patch)
        assert_strict(git_apply(tree, patch), patch)
        for path, _ in chain_files(patch):
            compile((tree / path).read_text(), path, "exec")


def test_dependency_patch_is_needed(wheel: zipfile.ZipFile, package_wheel: zipfile.ZipFile, tmp_path: Path) -> None:
    tree = base_tree(wheel, tmp_path / "tree", package_wheel)
    dependents = {"0060", "0076"}
    for patch in PATCHES:
        if patch.name.startswith("0059"):
            continue
        result = git_apply(tree, patch, "--check")
        if patch.name[:4] in dependents:
            assert result.returncode != 0, f"{patch.name} applies without 0059"
        else:
            assert_strict(git_apply(tree, patch), patch)


def test_new_module_imports_in_base_image(
    docker: DockerClient, base_tag: str, wheel: zipfile.ZipFile, package_wheel: zipfile.ZipFile, tmp_path: Path
) -> None:
    tree = base_tree(wheel, tmp_path / "tree", package_wheel)
    for patch in PATCHES:
        assert_strict(git_apply(tree, patch), patch)
    module = tree / "vllm" / "models" / "deepseek_v41" / "kv_pack.py"
    probe = (
        "import importlib.util as u; s = u.spec_from_file_location('kv_pack', '/probe/kv_pack.py'); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); "
        "print(m.parse_kv_pair(None), m.packed_capacity_tokens(4, 64, 3), m.switches_set({}))"
    )
    output = docker.run(
        base_tag, ["python3", "-c", probe], volumes=[(str(module.parent), "/probe", "ro")],
        networks=["none"], remove=True, pull="never",
    )
    assert str(output).strip() == "1 768 {}"


def test_manifest_lists_the_chain_in_apply_order() -> None:
    manifest = yaml.safe_load((EXAMPLE / "manifest.yaml").read_text())
    assert [EXAMPLE / item["file"] for item in manifest["chain"]] == PATCHES
    assert manifest["base"]["image"] == lib.DEFAULT_TAG
    assert manifest["base"]["source_root"] == lib.SOURCE_ROOT
