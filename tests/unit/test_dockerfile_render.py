"""Dockerfile.overlay from a plan: header, FROM the base by digest, COPY, one `rm -f` of whiteouts, sorted labels, no ENV."""

from __future__ import annotations

import json
from dataclasses import replace

from kvbake.bake.core.dockerfile import base_reference, render
from kvbake.bake.core.plan import make_plan
from tests.unit.helpers_manifest import locked_file, make_lock, minimal_document, tiny_manifest

TREE = {"pkg/mod.py": b"new\n"}


def plan_of(tmp_path, standin=True, repo_digest=None, stale=("pkg/__pycache__/mod.cpython-311.pyc",), image=None):
    document = minimal_document()
    document["standin"] = standin
    if image:
        document["base"]["image"] = image
    manifest = tiny_manifest(tmp_path / "p", document)
    lock = make_lock(manifest_sha256="f" * 64, files=(locked_file("pkg/mod.py", b"new\n", stale=stale),), repo_digest=repo_digest)
    return make_plan(manifest, lock, TREE)


def test_the_dockerfile_starts_from_the_config_digest_copies_whites_out_and_labels(tmp_path):
    plan = plan_of(tmp_path)
    lines = render(plan).splitlines()
    assert lines[0].startswith("# Rendered by `python build.py dockerfile` from manifest.yaml (sha256 " + "f" * 64 + ")")
    assert lines[1] == "# STAND-IN example: not the production chain."
    assert lines[2] == f"FROM {plan.lock.base.config_digest}"
    assert lines[3] == "COPY overlay/ /usr/lib/py/"
    assert json.loads(lines[4][4:]) == ["rm", "-f", "/usr/lib/py/pkg/__pycache__/mod.cpython-311.pyc"] and lines[4].startswith("RUN [")
    label_lines = lines[5:]
    assert label_lines[0].startswith("LABEL ") and all(line.endswith(" \\") for line in label_lines[:-1])
    pairs = [line.removeprefix("LABEL ").strip().removesuffix(" \\") for line in label_lines]
    assert pairs == [f"{json.dumps(k)}={json.dumps(v)}" for k, v in sorted(plan.labels.items())]
    assert "ENV" not in render(plan)


def test_a_production_plan_without_whiteouts_has_no_stand_in_line_and_no_rm(tmp_path):
    plan = plan_of(tmp_path, standin=False, stale=())
    text = render(plan)
    assert "STAND-IN" not in text and "RUN " not in text
    assert text.splitlines()[1] == f"FROM {plan.lock.base.config_digest}"


def test_the_base_is_named_by_its_registry_digest_when_known_and_a_build_uses_the_local_base(tmp_path):
    plan = plan_of(tmp_path, repo_digest="sha256:" + "e" * 64)
    assert base_reference(plan) == "kvbake-test/tiny@sha256:" + "e" * 64
    assert f"FROM kvbake-test/tiny@sha256:{'e' * 64}\n" in render(plan)
    assert "FROM sha256:" + "b" * 64 + "\n" in render(plan, "sha256:" + "b" * 64)
    with_port = plan_of(tmp_path / "port", repo_digest="sha256:" + "e" * 64, image="127.0.0.1:5000/team/tiny:1")
    assert base_reference(with_port) == "127.0.0.1:5000/team/tiny@sha256:" + "e" * 64
    no_digest = replace(plan, lock=replace(plan.lock, base=replace(plan.lock.base, repo_digest=None)))
    assert base_reference(no_digest) == plan.lock.base.config_digest
