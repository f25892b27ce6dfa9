"""The credential scan of labels and records: what it finds, what it lets pass, and that it never echoes the secret."""

from __future__ import annotations

import base64

import pytest

from kvbake.errors import IntegrityError
from kvbake.secretscan import credential_kind, find_credentials, refuse_credentials, refuse_in_option

GHP = "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8"
FOUND = [
    ("https://builder:s3cret@example.invalid/x.git", "URL userinfo"),
    ("https://ghp_token@github.com/org/repo.git", "URL userinfo"),
    ("git://user@example.invalid/repo", "URL userinfo"),
    ("ssh://deploy:hunter2@node-a", "URL userinfo"),
    ("redis://:onlypassword@cache:6379/0", "URL userinfo"),
    ("Authorization: token abc", "an Authorization header"),
    ("authorization=xyz", "an Authorization header"),
    ("Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "a Bearer token"),
    ("Basic " + base64.b64encode(b"user:password").decode(), "a Basic authorization value"),
    (f"token {GHP}", "a GitHub token"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "a GitHub token"),
    ("gho_" + "x" * 36, "a GitHub token"),
    ("glpat-abcdefghij0123456789", "a GitLab token"),
    ("hf_" + "AbCdEfGhIj" * 3 + "kLmN", "a Hugging Face token"),
    ("AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
    ("key ASIA0123456789ABCDEF in use", "an AWS access key id"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=", "a private key"),
    ("-----BEGIN PRIVATE KEY-----", "a private key"),
    ("https://example.invalid/x?token=abc123", "a password or token query pair"),
    ("https://example.invalid/x?a=1&password=hunter2", "a password or token query pair"),
    ("password=hunter2", "a password or token query pair"),
    ("api_key=0123", "a password or token query pair"),
]
CLEAN = [
    "sha256:" + "ab" * 32,
    "0123456789abcdef0123456789abcdef01234567",
    "0051:" + "f" * 64 + ",0053:" + "e" * 64,
    "https://example.invalid/donor.git",
    "ssh://admin@node-a",
    "git@github.com:org/repo.git",
    "builder@buildhost",
    "127.0.0.1:5000/kvbake/standin-kvpack:0.33.0-kvpack-0123456789ab",
    "basic packing support for the allocator",
    "the bearer of this image",
    "Basic auth is refused",
    "Authorization headers are never logged",
    "max_tokens=512 and tokens=3",
    "hf_small",
    "ghp_short",
    "AKIA",
    "akiaiosfodnn7example",
    "VLLM_DSV41_KV_PAIR,VLLM_EXL3_TF_PROMPT_ALIAS",
    "BEGIN PUBLIC KEY",
    "token= ",
    "2024-01-01T00:00:00Z",
    "",
]


@pytest.mark.parametrize("text,kind", FOUND)
def test_a_credential_is_found_with_its_kind(text: str, kind: str) -> None:
    assert credential_kind(text) == kind


@pytest.mark.parametrize("name", ["PASSWORD", "Password", "pAsSwD", "TOKEN", "Access_Token", "API_KEY", "ApiKey",
                                  "SECRET", "Client_Secret"])
def test_a_credential_pair_is_found_whatever_the_case_of_its_name(name: str) -> None:
    for text in (f"{name}=hunter22", f"https://example.invalid/x?a=1&{name}=hunter22", f"run with {name}=hunter22 set"):
        assert credential_kind(text) == "a password or token query pair", text
    assert find_credentials({"env": [f"{name}=hunter22"]}) == [("env[0]", "a password or token query pair")]
    with pytest.raises(IntegrityError) as caught:
        refuse_in_option("--reason", f"rotated {name}=hunter22", "the release record", "give it without it")
    assert caught.value.exit_code == 7 and "hunter22" not in caught.value.one_line()


@pytest.mark.parametrize("text", CLEAN)
def test_a_near_miss_passes(text: str) -> None:
    assert credential_kind(text) is None


def test_find_credentials_names_nested_keys_and_list_items() -> None:
    record = {"image": "r/x:1", "plan": {"donor": {"url": "https://u:p@h/x"}, "args": ["ok", f"--token={GHP}"]}, "n": 3}
    assert find_credentials(record) == [("plan.donor.url", "URL userinfo"), ("plan.args[1]", "a GitHub token")]


def test_refuse_credentials_names_the_key_and_never_the_secret() -> None:
    labels = {"org.opencontainers.image.source": "https://builder:s3cret-value@example.invalid/x.git", "org.kvbake.format": "1"}
    with pytest.raises(IntegrityError) as caught:
        refuse_credentials(labels, "image labels")
    text = caught.value.one_line()
    assert caught.value.exit_code == 7
    assert text.startswith("image labels: org.opencontainers.image.source (URL userinfo) looks like a credential")
    assert "s3cret-value" not in text and "builder" not in text
    assert "credential helper" in text


def test_refuse_credentials_lets_a_clean_mapping_pass() -> None:
    assert refuse_credentials({"org.kvbake.chain": "0051:" + "a" * 64, "nested": {"k": ["v"]}}, "labels") is None


def test_a_credential_in_a_key_is_found_and_placed_by_its_parent() -> None:
    found = find_credentials({"env": {"password=hunter2": "x"}})
    assert found == [("a key of env", "a password or token query pair")]


def test_labels_refuse_a_lock_whose_donor_url_carries_a_token(tmp_path) -> None:
    import dataclasses

    from kvbake.bake.core.provenance import labels
    from tests.unit.helpers_manifest import make_lock, tiny_manifest

    manifest = tiny_manifest(tmp_path)
    assert labels(manifest, make_lock(), "1-kvpack-x")["org.opencontainers.image.source"] == "https://example.invalid/tiny.git"
    lock = dataclasses.replace(make_lock(), donor_url=f"https://{GHP}@example.invalid/tiny.git")
    with pytest.raises(IntegrityError) as caught:
        labels(manifest, lock, "1-kvpack-x")
    assert "image labels: org.opencontainers.image.source (URL userinfo)" in caught.value.one_line()
    assert GHP not in caught.value.one_line()


def test_a_record_holding_a_credential_is_not_written(tmp_path) -> None:
    from kvbake.bake.core.build_record import write_json_record

    record = {"image": "r/x:tag1", "plan": {"donor": "https://builder:s3cret@example.invalid/x.git"}}
    with pytest.raises(IntegrityError) as caught:
        write_json_record(tmp_path / "builds", "r/x:tag1", record)
    assert caught.value.exit_code == 7
    assert all(field in caught.value.message for field in ("record r/x:tag1", "plan.donor", "URL userinfo", "credential"))
    assert "s3cret" not in caught.value.one_line()
    assert not (tmp_path / "builds" / "tag1.json").exists()
    clean = {"image": "r/x:tag1", "built_by": "builder@buildhost"}
    assert write_json_record(tmp_path / "builds", "r/x:tag1", clean).name == "tag1.json"


# -- what reaches node state, the journal, the diverged mark and the reports ---------------------------------------

HF = "hf_" + "AbCdEfGhIj" * 3 + "kLmN"
STANDIN = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"


def test_withhold_replaces_each_credential_like_string_whole_and_keeps_the_rest() -> None:
    import dataclasses
    from collections import namedtuple

    from kvbake.secretscan import withhold_credentials, withheld

    @dataclasses.dataclass(frozen=True)
    class Step:
        name: str
        detail: str
        data: dict

    Pair = namedtuple("Pair", "left right")
    value = {"cause": f"launcher on b exited 1 (HF_TOKEN={HF} was rejected)", "n": 3, "none": None,
             "steps": (Step("baseline", "answered password=hunter22", {"codes": ["A1", "ok"]}),), "pair": Pair("x", f"token {GHP}"),
             f"key {GHP}": "v"}
    assert withhold_credentials(value) == {
        "cause": withheld("a Hugging Face token"), "n": 3, "none": None,
        "steps": (Step("baseline", withheld("a password or token query pair"), {"codes": ["A1", "ok"]}),),
        "pair": Pair("x", withheld("a GitHub token")), withheld("a GitHub token"): "v"}
    assert withheld("a GitHub token") == "(withheld: it looked like a GitHub token)"
    clean = {"a": ["b", ("c",)], "d": 1}
    assert withhold_credentials(clean) == clean


def test_a_reason_that_looks_like_a_credential_is_refused_by_every_preset_choice() -> None:
    from kvbake.errors import PresetError
    from kvbake.manifest import load_manifest
    from kvbake.serve.core.presets import choose_preset

    manifest = load_manifest(STANDIN)
    with pytest.raises(IntegrityError) as caught:
        choose_preset(manifest, "longctx-524288", allow_held=True, reason=f"window {GHP}")
    assert caught.value.exit_code == 7 and caught.value.message.startswith("--reason holds a GitHub token")
    assert GHP not in caught.value.one_line() and "without the credential" in caught.value.fix
    with pytest.raises(PresetError) as control_character:
        choose_preset(manifest, "control", reason="two\nlines")
    assert control_character.value.exit_code == 14
    assert "--reason" in control_character.value.message and "U+000A" in control_character.value.message
    assert choose_preset(manifest, "longctx-524288", allow_held=True, reason="supervised window, 4 tokens=512").override == (
        "--allow-held: supervised window, 4 tokens=512")


def test_node_state_is_written_with_credential_like_strings_withheld(tmp_path) -> None:
    import dataclasses

    from kvbake.ship.adapters.nodestate import NodeState
    from kvbake.ship.core.release import Release
    from kvbake.secretscan import withheld
    from tests.unit.fake_engine import FakeEngine

    engine = FakeEngine("a")
    engine.images["sha256:x"] = {"Id": "sha256:x"}
    release = Release(image="r/x@sha256:" + "a" * 64, config_digest="sha256:x", layers=("sha256:l",), labels={"k": "v"}, preset="p",
                      switches={}, max_model_len=4096, launcher_args=(), deployed_by="ops", deployed_at="t", reason=f"old {GHP}",
                      override=None)
    state = NodeState("a", engine)
    state.write("sha256:x", dataclasses.replace(state.read(), current=release, previous=release, adopted=release,
                                                transition={"id": "deploy-1", "reason": f"old {GHP}"},
                                                diverged={"cause": f"exited 1 ({HF})"}), f"deploy-1 by {GHP}")
    records = state.read()
    assert records.current.reason == records.transition["reason"] == withheld("a GitHub token")
    assert records.previous.reason == records.adopted.reason == withheld("a GitHub token")
    assert records.current.id == release.id and records.current.labels == {"k": "v"}
    assert records.diverged == {"cause": withheld("a Hugging Face token")}
    assert records.audit.endswith(f" {withheld('a GitHub token')}\n")
    written = b"".join(engine.files["kvbake-state"].values())
    assert GHP.encode() not in written and HF.encode() not in written


def test_the_journal_and_the_diverged_mark_are_written_with_credential_like_strings_withheld(tmp_path) -> None:
    from kvbake.ship.core.journal import Journal, NodePlan, mark_diverged, read_diverged, read_journal, write_journal
    from kvbake.secretscan import withheld

    records = {"current": {"reason": f"old {GHP}"}, "previous": None}
    write_journal(tmp_path, Journal("deploy-1", "deploy", "r", (NodePlan("a", None, None, "sha256:x", None, records, records),)))
    assert read_journal(tmp_path).nodes[0].after_records["current"]["reason"] == withheld("a GitHub token")
    mark_diverged(tmp_path, {"journal": "deploy-1", "cause": f"launcher on b exited 1 ({HF})", "repair": "python build.py deploy --revert"})
    assert read_diverged(tmp_path) == {"journal": "deploy-1", "cause": withheld("a Hugging Face token"),
                                       "repair": "python build.py deploy --revert"}
    written = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert GHP.encode() not in written and HF.encode() not in written


def test_a_validation_report_is_written_with_credential_like_strings_withheld(tmp_path) -> None:
    import json

    from kvbake.manifest import load_manifest
    from kvbake.operate.adapters.memwatch import GIB
    from kvbake.operate.core.prefix_identity import Check
    from kvbake.serve.core.presets import choose_preset
    from kvbake.secretscan import withheld
    from kvbake.operate.core.validate_plan import Report, StepResult, stopped
    from kvbake.operate.adapters.validation_run import write_report

    manifest = load_manifest(STANDIN)
    steps = (StepResult("baseline", "3/3 runs", (Check("answer", False, f"the serve answered 'token {GHP}'"),), {"text": f"{HF}"}),
             stopped("prefix identity", f"the serve answered password=hunter22 ({HF})", None))
    report = Report(choose_preset(manifest, "control"), "http://127.0.0.1:8000", "tiny", {"id": None, "text": "no release record"},
                    "synthetic", "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", steps,
                    {"watched": False, "floor_bytes": GIB, "samples": 0, "lowest_bytes": {}}, "not requested")
    path = write_report(tmp_path, report)
    data = json.loads(path.read_text())
    text = path.with_suffix(".txt").read_text()
    assert data["stop"]["reason"] == withheld("a Hugging Face token") == data["steps"][0]["data"]["text"]
    assert data["steps"][0]["checks"][0]["detail"] == withheld("a GitHub token")
    assert f"STOPPED at prefix identity: {withheld('a Hugging Face token')}" in text
    assert f"FAIL answer: {withheld('a GitHub token')}" in text
    for written in (path.read_text(), text, path.with_suffix(".html").read_text()):
        assert GHP not in written and HF not in written and "hunter22" not in written
