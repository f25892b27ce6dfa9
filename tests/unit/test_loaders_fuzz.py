"""Property tests of the manifest and deployment-file loaders: any input gives a value or a one-line ManifestError."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbake.deployfile import Deployment, load_deployment
from kvbake.errors import ManifestError
from kvbake.manifest import Manifest, load_manifest
from tests.unit.helpers_manifest import MINIMAL, referenced_files, write_patch_files

DATA = Path(__file__).resolve().parent.parent / "data" / "manifests"
VALID_TEXTS = [MINIMAL] + [p.read_text(encoding="utf-8") for p in sorted((DATA / "valid").glob("*.yaml"))]
VALID_DOCUMENTS = [yaml.safe_load(text) for text in VALID_TEXTS]
DEPLOYMENT = {
    "format": 1,
    "nodes": [{"name": "head", "host": "ssh://admin@node-a", "role": "head"}, {"name": "w1", "host": "tcp://10.0.0.2:2375", "role": "worker"}],
    "launcher": {"command": ["/usr/local/bin/restart", "--now"], "container": "vllm", "timeout_s": 120},
    "lock_stale_after_s": 600,
}
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FUZZ_NESTED = settings(FUZZ, max_examples=100)

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=40),
                    st.sampled_from(["https://u:t@example.invalid/x.git", "ghp_" + "a" * 36, "a\nb", "\x00", "{base_tag}", "../x", "/abs", 10**400, 2**64, -1]))
keys = st.one_of(st.text(max_size=12), st.integers(), st.sampled_from(["format", "name", "chain", "presets", "switches", "nodes", "launcher"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=20)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder with every patch file the valid manifests name."""
    root = tmp_path_factory.mktemp("fuzz")
    for text in VALID_TEXTS:
        write_patch_files(root, referenced_files(text))
    return root


def outcome(load: Callable[[Path], Any], path: Path, data: bytes, expected: type) -> Any:
    """Write `data`, load it: a value of `expected`, or a ManifestError whose one line names the file and a fix."""
    path.write_bytes(data)
    try:
        value = load(path)
    except ManifestError as err:
        text = str(err)
        assert text == err.one_line() and not CONTROL.search(text), text
        assert path.name in text, text
        assert err.fix and err.exit_code == 3
        return err
    assert isinstance(value, expected)
    return value


def load_manifest_text(folder: Path, data: bytes) -> Any:
    return outcome(load_manifest, folder / "fuzz-manifest.yaml", data, Manifest)


def load_deployment_text(folder: Path, data: bytes) -> Any:
    return outcome(load_deployment, folder / "fuzz-deploy.yaml", data, Deployment)


def mutate(document: Any, data: st.DataObject) -> Any:
    """Replace, delete or add one entry somewhere inside `document` (a copy)."""
    document = copy.deepcopy(document)
    node = document
    while True:
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
        if not children:
            return data.draw(values)
        key, child = data.draw(st.sampled_from(children))
        if isinstance(child, (dict, list)) and child and data.draw(st.booleans()):
            node = child
            continue
        action = data.draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            node[key] = data.draw(values)
        elif action == "delete":
            del node[key]
        elif isinstance(node, dict):
            node[data.draw(keys)] = data.draw(values)
        else:
            node.append(data.draw(values))
        return document


@FUZZ
@given(st.binary(max_size=300))
def test_manifest_loader_on_random_bytes(folder: Path, data: bytes) -> None:
    load_manifest_text(folder, data)


@FUZZ
@given(st.text(max_size=300))
def test_manifest_loader_on_random_text(folder: Path, text: str) -> None:
    load_manifest_text(folder, text.encode("utf-8", "surrogatepass"))


@FUZZ_NESTED
@given(values)
def test_manifest_loader_on_random_yaml_documents(folder: Path, document: Any) -> None:
    load_manifest_text(folder, yaml.safe_dump(document).encode())


@FUZZ_NESTED
@given(st.sampled_from(VALID_DOCUMENTS), st.data())
def test_manifest_loader_on_mutated_valid_manifests(folder: Path, document: dict, data: st.DataObject) -> None:
    mutated = mutate(document, data)
    load_manifest_text(folder, yaml.safe_dump(mutated, allow_unicode=data.draw(st.booleans())).encode())


@FUZZ
@given(st.sampled_from(VALID_TEXTS), st.integers(min_value=0), st.integers(min_value=0, max_value=8), st.text(max_size=8))
def test_manifest_loader_on_valid_text_with_a_splice(folder: Path, text: str, at: int, cut: int, insert: str) -> None:
    at %= len(text) + 1
    spliced = text[:at] + insert + text[at + cut:]
    load_manifest_text(folder, spliced.encode("utf-8", "surrogatepass"))


@FUZZ
@given(st.binary(max_size=300))
def test_deployment_loader_on_random_bytes(folder: Path, data: bytes) -> None:
    load_deployment_text(folder, data)


@FUZZ_NESTED
@given(values)
def test_deployment_loader_on_random_yaml_documents(folder: Path, document: Any) -> None:
    load_deployment_text(folder, yaml.safe_dump(document).encode())


@FUZZ
@given(st.data())
def test_deployment_loader_on_mutated_valid_files(folder: Path, data: st.DataObject) -> None:
    load_deployment_text(folder, yaml.safe_dump(mutate(DEPLOYMENT, data)).encode())


@FUZZ
@given(st.integers(min_value=0), st.integers(min_value=0, max_value=8), st.text(max_size=8))
def test_deployment_loader_on_valid_text_with_a_splice(folder: Path, at: int, cut: int, insert: str) -> None:
    text = yaml.safe_dump(DEPLOYMENT)
    at %= len(text) + 1
    load_deployment_text(folder, (text[:at] + insert + text[at + cut:]).encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("text", VALID_TEXTS[:1] + [yaml.safe_dump(d) for d in VALID_DOCUMENTS])
def test_the_unmutated_seeds_load(folder: Path, text: str) -> None:
    assert isinstance(load_manifest_text(folder, text.encode()), Manifest)


def test_the_unmutated_deployment_seed_loads(folder: Path) -> None:
    assert isinstance(load_deployment_text(folder, yaml.safe_dump(DEPLOYMENT).encode()), Deployment)


def _deployment_with(folder: Path, change: Callable[[dict], None]) -> Path:
    document = copy.deepcopy(DEPLOYMENT)
    change(document)
    path = folder / "deploy-case.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.mark.parametrize("change,fragment", [
    (lambda d: d["nodes"][0].update(host="ssh://admin:hunter2@node-a"), "deploy-case.yaml: nodes[0].host holds URL userinfo"),
    (lambda d: d["launcher"].update(command=["/bin/restart", "--env\nX=1"]), "deploy-case.yaml: launcher.command[1] contains control character U+000A"),
    (lambda d: d["launcher"].update(timeout_s=10**400), "launcher.timeout_s: 1000"),
    (lambda d: d.update(lock_stale_after_s=10**400), "lock_stale_after_s: 1000"),
    (lambda d: d["nodes"].append(dict(d["nodes"][0])), "deploy-case.yaml: node names repeat"),
], ids=["ssh-password", "control-character", "huge-timeout", "huge-stale-age", "repeated-node"])
def test_a_bad_deployment_file_is_a_manifest_error(folder: Path, change: Callable[[dict], None], fragment: str) -> None:
    with pytest.raises(ManifestError) as caught:
        load_deployment(_deployment_with(folder, change))
    assert caught.value.exit_code == 3
    assert fragment in caught.value.one_line()
    assert "hunter2" not in caught.value.one_line()


def test_an_ssh_host_may_name_a_user(folder: Path) -> None:
    deployment = load_deployment(_deployment_with(folder, lambda d: None))
    assert deployment.nodes[0].host == "ssh://admin@node-a"
    assert deployment.launcher.timeout_s == 120.0


def test_a_deployment_path_that_is_a_folder_is_a_manifest_error(folder: Path) -> None:
    (folder / "deploy-dir.yaml").mkdir(exist_ok=True)
    with pytest.raises(ManifestError, match="deployment file deploy-dir.yaml unreadable: Is a directory") as caught:
        load_deployment(folder / "deploy-dir.yaml")
    assert caught.value.exit_code == 3


def test_a_manifest_path_that_is_a_folder_is_a_manifest_error(folder: Path) -> None:
    (folder / "manifest-dir.yaml").mkdir(exist_ok=True)
    with pytest.raises(ManifestError, match="manifest manifest-dir.yaml unreadable: Is a directory") as caught:
        load_manifest(folder / "manifest-dir.yaml")
    assert caught.value.exit_code == 3


@pytest.mark.parametrize("text,fragment", [
    ("? [a]\n: b\n", "fuzz-manifest.yaml line 1: malformed YAML: a list cannot be a mapping key"),
    ("{0: null}\n", "(top level): unknown key 0; fix: edit the manifest"),
    ("x: 2024-13-45\n", "fuzz-manifest.yaml: a YAML value cannot be read: month must be in 1..12"),
    ("&loop [*loop]\n", "fuzz-manifest.yaml: [0] refers to itself through a YAML alias"),
], ids=["list-key", "integer-key", "impossible-date", "recursive-alias"])
def test_the_crashes_the_fuzzing_found_are_manifest_errors(folder: Path, text: str, fragment: str) -> None:
    err = load_manifest_text(folder, text.encode())
    assert isinstance(err, ManifestError)
    assert fragment in err.one_line()
