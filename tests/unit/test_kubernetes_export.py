"""`export-k8s` over a copy of the stand-in project: the documents, their offline checks, and the docs' example.

The example in docs/kubernetes.md is this file's export of the stand-in release; to write it again after a deliberate
change: `.venv/bin/python -m tests.unit.test_kubernetes_export`.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from kvbake.attest.core.admission import attestation_problem
from kvbake.bake.core.plan import tag_for
from kvbake.cli import main
from kvbake.errors import IntegrityError, ManifestError, SignatureError, UsageError
from kvbake.kubernetes.core import crd_schemas
from kvbake.kubernetes.core.own_checks import Expected
from kvbake.kubernetes.core.release_export import LWS_FILE, NAMESPACE_FILE, PROVENANCE_FILE, SIGNATURE_FILE, check_documents
from kvbake.kubernetes.core.serve_pods import quantity
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.ship.core.push_record import PUSHES_DIR

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "examples" / "standin"
EXAMPLE = REPO / "docs" / "kubernetes-standin"  # the inputs the docs show, and the export they show
EXPORTED = EXAMPLE / "export"
PRINTED = EXAMPLE / "printed.txt"
DIGEST = "sha256:" + "5e" * 32  # the stand-in's push record: a digest no registry holds
PRESET = "packing-327680"
ARGS = ("export-k8s", "--preset", PRESET, "--secret", "standin-serve", "--model-claim", "standin-model")
FILES = [NAMESPACE_FILE, SIGNATURE_FILE, PROVENANCE_FILE, LWS_FILE]


def make_project(root: Path, pushed: bool = True) -> Path:
    """The stand-in project with the example's deploy.yaml and reviewer's key, and (unless told) its push record."""
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake"))
    for name in ("deploy.yaml", "reviewer.pub"):
        shutil.copy(EXAMPLE / name, root / name)
    if pushed:
        manifest = load_manifest(root / "manifest.yaml")
        record = root / PUSHES_DIR / f"{tag_for(manifest, read_lock(manifest))}.json"
        record.parent.mkdir(parents=True)
        record.write_text(json.dumps({"pinned": f"{manifest.output.repository}@{DIGEST}"}), encoding="utf-8")
    return root


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = make_project(tmp_path / "standin")
    monkeypatch.chdir(root)
    return root


def export(*extra: str) -> tuple[int, str, str]:
    """Run the command in the current folder: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*ARGS, *extra])
    return code, out.getvalue(), err.getvalue()


def written(folder: Path) -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(folder.iterdir())}


def documents(folder: Path) -> dict[str, dict[str, Any]]:
    return {name: yaml.safe_load(text) for name, text in written(folder).items()}


def expected_for(folder: Path, policy: bool = True) -> Expected:
    image = documents(folder)[LWS_FILE]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["image"]
    return Expected(image, ("HF_TOKEN",), policy, "standin-kvpack")


def leader(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return docs[LWS_FILE]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]


def worker(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return docs[LWS_FILE]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]


# --- the example the docs show --------------------------------------------------------------------------------


def test_the_docs_example_is_what_the_export_of_the_stand_in_release_writes_and_prints(project: Path) -> None:
    code, out, err = export("--out", "k8s")
    assert (code, err) == (0, "")
    assert written(project / "k8s") == written(EXPORTED), "docs/kubernetes-standin/export is stale: regenerate it (module docstring)"
    assert out == PRINTED.read_text(encoding="utf-8"), "docs/kubernetes-standin/printed.txt is stale: regenerate it"


def test_two_runs_into_fresh_folders_write_the_same_bytes(project: Path) -> None:
    assert export("--out", "one")[0] == 0 and export("--out", "two")[0] == 0
    assert written(project / "one") == written(project / "two") and list(written(project / "one")) == FILES


def test_dash_prints_the_same_documents_as_one_stream_and_writes_nothing(project: Path) -> None:
    before = sorted(p.name for p in project.iterdir())
    code, out, _ = export("--out", "-")
    assert code == 0 and sorted(p.name for p in project.iterdir()) == before
    assert list(yaml.safe_load_all(out)) == list(documents(EXPORTED).values())
    assert out.startswith("# release ") and "# not in the pods" in out


def test_json_names_the_files_the_release_and_what_the_pods_go_without(project: Path) -> None:
    code, out, _ = export("--out", "k8s", "--json")
    data = json.loads(out)
    assert code == 0 and data["files"] == FILES and data["preset"] == PRESET and data["image"].endswith("@" + DIGEST)
    assert {(s["source"], s["setting"].split()[0]) for s in data["not_in_pods"]} >= {("spark-a", "ulimits"), ("spark-b", "devices")}
    assert set(data["checked"].values()) == set(crd_schemas.CRD_FILES.values())


# --- what the documents say ------------------------------------------------------------------------------------


def test_every_document_passes_its_pinned_schema_and_the_set_names_both_kinds_versions(project: Path) -> None:
    assert export("--out", "k8s")[0] == 0
    docs = documents(project / "k8s")
    assert [crd_schemas.schema_problems(d) for d in docs.values()] == [[], [], [], []]
    assert (docs[LWS_FILE]["apiVersion"], docs[SIGNATURE_FILE]["apiVersion"]) == (crd_schemas.LWS_API, crd_schemas.CIP_API)


def test_the_set_restarts_a_group_whole_and_rolls_one_group_at_a_time(project: Path) -> None:
    assert export("--out", "k8s", "--replicas", "3")[0] == 0
    spec = documents(project / "k8s")[LWS_FILE]["spec"]
    assert spec["replicas"] == 3 and spec["leaderWorkerTemplate"]["size"] == 2
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxSurge": 0, "maxUnavailable": 1}


def test_the_pods_run_the_preset_and_the_launchers_multi_node_arguments_from_the_group(project: Path) -> None:
    assert export("--out", "k8s")[0] == 0
    docs = documents(project / "k8s")
    ranks_env = (project / "configs" / PRESET / "ranks.env").read_text().splitlines()[1:]
    launcher_args = (project / "configs" / PRESET / "launcher.args").read_text().splitlines()[1:]
    for pod in (leader(docs), worker(docs)):
        assert [f"{e['name']}={e['value']}" for e in pod["env"] if "value" in e] == ranks_env
        args = pod["args"]
        assert " ".join(launcher_args) in " ".join(args)
        assert args[args.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
        assert args[args.index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)" and args[args.index("--nnodes") + 1] == "2"
        assert pod["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert "--headless" in worker(docs)["args"] and "--headless" not in leader(docs)["args"]
    assert leader(docs)["readinessProbe"]["httpGet"]["path"] == "/health" and "readinessProbe" not in worker(docs)


def test_the_provenance_policy_admits_exactly_what_deploys_signature_gate_admits(project: Path) -> None:
    assert export("--out", "k8s")[0] == 0
    policy = documents(project / "k8s")[PROVENANCE_FILE]
    attestation = policy["spec"]["authorities"][0]["attestations"][0]
    stated = json.loads(attestation["policy"]["data"])  # CUE written as JSON: the statement must hold these fields
    statement = {**stated, "subject": [{"digest": {"sha256": DIGEST.partition(":")[2]}}]}
    config = stated["predicate"]["invocation"]["parameters"]["configDigest"]
    assert attestation["predicateType"] == "https://slsa.dev/provenance/v0.2" == stated["predicateType"]
    assert attestation_problem([statement], DIGEST, config, stated["predicate"]["materials"]) is None
    assert config == read_lock(load_manifest(project / "manifest.yaml")).derived.image_id
    assert DIGEST.partition(":")[2] in policy["spec"]["images"][0]["glob"]


def test_the_policies_check_the_listed_key_without_a_transparency_log_in_kvbakes_signature_format(project: Path) -> None:
    assert export("--out", "k8s")[0] == 0
    docs = documents(project / "k8s")
    key = (project / "reviewer.pub").read_text()
    for name in (SIGNATURE_FILE, PROVENANCE_FILE):
        (authority,) = docs[name]["spec"]["authorities"]
        assert authority["key"]["data"] == key and authority["signatureFormat"] == "legacy" and "ctlog" not in authority
    assert docs[NAMESPACE_FILE]["metadata"]["labels"] == {"policy.sigstore.dev/include": "true"}


def test_no_policy_writes_neither_policies_nor_the_include_label(project: Path) -> None:
    assert export("--out", "k8s", "--no-policy")[0] == 0
    docs = documents(project / "k8s")
    assert list(docs) == [NAMESPACE_FILE, LWS_FILE] and "labels" not in docs[NAMESPACE_FILE]["metadata"]


def test_a_host_path_model_and_a_pull_secret_reach_the_pods_and_the_policies(project: Path) -> None:
    code, _, _ = export("--out", "k8s", "--pull-secret", "registry-lan")  # --model-claim given by ARGS
    assert code == 0
    docs = documents(project / "k8s")
    pods = docs[LWS_FILE]["spec"]["leaderWorkerTemplate"]
    assert pods["leaderTemplate"]["spec"]["imagePullSecrets"] == [{"name": "registry-lan"}]
    assert docs[SIGNATURE_FILE]["spec"]["authorities"][0]["source"] == [{"signaturePullSecrets": [{"name": "registry-lan"}]}]
    main_args = [a for a in ARGS if a not in ("--model-claim", "standin-model")]
    assert main([*main_args, "--model-host-path", "/srv/models/standin", "--out", "host"]) == 0
    volume = documents(project / "host")[LWS_FILE]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"][1]
    assert volume == {"name": "model", "hostPath": {"path": "/srv/models/standin", "type": "Directory"}}


def test_a_one_node_deployment_is_a_group_of_one_without_multi_node_arguments(project: Path) -> None:
    text = (project / "deploy.yaml").read_text()
    (project / "deploy.yaml").write_text(text[:text.index("  - name: spark-b")] + text[text.index("launcher:"):])
    assert export("--out", "k8s")[0] == 0
    docs = documents(project / "k8s")
    assert docs[LWS_FILE]["spec"]["leaderWorkerTemplate"]["size"] == 1 and "--nnodes" not in leader(docs)["args"]


def test_docker_sizes_become_binary_quantities() -> None:
    assert [quantity(size) for size in ("16g", "512m", "64k", "1024b", "1024")] == ["16Gi", "512Mi", "64Ki", "1024", "1024"]


# --- refusals ----------------------------------------------------------------------------------------------------


def test_an_existing_folder_is_refused_and_with_force_replaced_whole(project: Path) -> None:
    (project / "k8s").mkdir()
    (project / "k8s" / "old.yaml").write_text("kind: Stale\n")
    code, out, err = export("--out", "k8s")
    assert code == UsageError.exit_code and out == "" and "already exists" in err and len(err.splitlines()) == 1
    assert export("--out", "k8s", "--force")[0] == 0 and list(written(project / "k8s")) == FILES


@pytest.mark.parametrize(("edit", "kind", "words"), [
    (lambda text: text.replace("    SECRET_ENV: '[\"HF_TOKEN\"]'\n", ""), UsageError, "--secret"),
    (lambda text: text.replace("keys: [reviewer.pub]", "keys: []"), SignatureError, "signing key"),
    (lambda text: text.replace("SHM_SIZE: 16g", "SHM_SIZE: 16g\n    SHAPE: ray"), ManifestError, "Ray"),
], ids=["secret-without-secret-env", "policy-without-keys", "ray-shape"])
def test_a_deployment_the_export_cannot_carry_is_refused_in_one_line(project: Path, edit: Callable[[str], str], kind: type,
                                                                     words: str) -> None:
    (project / "deploy.yaml").write_text(edit((project / "deploy.yaml").read_text()))
    code, out, err = export("--out", "k8s")
    assert code == kind.exit_code and out == "" and words in err and len(err.splitlines()) == 1
    assert not (project / "k8s").exists()


def drop_container_name(docs: dict[str, dict[str, Any]]) -> None:
    del worker(docs)["name"]


def tag_the_image(docs: dict[str, dict[str, Any]]) -> None:
    leader(docs)["image"] = "127.0.0.1:5000/kvbake/standin-kvpack:latest"


def inline_the_secret(docs: dict[str, dict[str, Any]]) -> None:
    entry = next(e for e in worker(docs)["env"] if e["name"] == "HF_TOKEN")
    entry.pop("valueFrom")
    entry["value"] = "hf_not-a-real-token"


def add_a_transparency_log(docs: dict[str, dict[str, Any]]) -> None:
    docs[SIGNATURE_FILE]["spec"]["authorities"][0]["ctlog"] = {"url": "https://rekor.example.invalid"}


def drop_the_key(docs: dict[str, dict[str, Any]]) -> None:
    del docs[PROVENANCE_FILE]["spec"]["authorities"][0]["key"]


def drop_the_include_label(docs: dict[str, dict[str, Any]]) -> None:
    del docs[NAMESPACE_FILE]["metadata"]["labels"]


def misspell_a_field(docs: dict[str, dict[str, Any]]) -> None:
    docs[LWS_FILE]["spec"]["leaderWorkerTemplate"]["restartPolicyy"] = "None"


@pytest.mark.parametrize(("mutate", "words"), [
    (drop_container_name, "missing key 'name'"), (tag_the_image, "is not the pushed digest reference"),
    (inline_the_secret, "gives the secret HF_TOKEN inline"), (add_a_transparency_log, "gives ctlog"),
    (drop_the_key, "has no public key"), (drop_the_include_label, "policy.sigstore.dev/include"),
    (misspell_a_field, "unknown key 'restartPolicyy'"),
], ids=["required-field-removed", "tag-not-digest", "inline-secret", "transparency-log", "no-key", "no-include-label",
        "unknown-field"])
def test_a_document_that_breaks_its_schema_or_an_own_check_is_refused(project: Path, mutate: Callable, words: str) -> None:
    assert export("--out", "k8s")[0] == 0
    docs = documents(project / "k8s")
    check_documents(docs, expected_for(project / "k8s"))  # as written: no problem
    broken = copy.deepcopy(docs)
    mutate(broken)
    with pytest.raises(IntegrityError) as caught:
        check_documents(broken, expected_for(project / "k8s"))
    assert caught.value.exit_code == 7 and words in caught.value.message


def test_the_closed_schema_keeps_open_what_kubernetes_keeps_open() -> None:
    lws = crd_schemas.validator(crd_schemas.LWS_API, "LeaderWorkerSet").schema
    spec = lws["properties"]["spec"]
    assert spec["additionalProperties"] is False and "additionalProperties" not in lws
    labels = spec["properties"]["leaderWorkerTemplate"]["properties"]["workerTemplate"]["properties"]["metadata"]["properties"]["labels"]
    assert labels["additionalProperties"] == {"type": "string"}


def regenerate_example() -> None:
    """Write docs/kubernetes-standin/export and printed.txt again from a fresh stand-in project."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        root = make_project(Path(scratch) / "standin")
        os.chdir(root)
        code, out, err = export("--out", "k8s")
        assert code == 0, err
        shutil.rmtree(EXPORTED, ignore_errors=True)
        shutil.copytree(root / "k8s", EXPORTED)
        PRINTED.write_text(out, encoding="utf-8")


if __name__ == "__main__":
    regenerate_example()
