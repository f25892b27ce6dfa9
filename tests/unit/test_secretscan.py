"""The credential scan of labels and records: what it finds, what it lets pass, and that it never echoes the secret."""

from __future__ import annotations

import base64

import pytest

from kvbake.errors import IntegrityError
from kvbake.secretscan import credential_kind, find_credentials, refuse_credentials

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

    from kvbake.provenance import labels
    from tests.unit.helpers_manifest import make_lock, tiny_manifest

    manifest = tiny_manifest(tmp_path)
    assert labels(manifest, make_lock(), "1-kvpack-x")["org.opencontainers.image.source"] == "https://example.invalid/tiny.git"
    lock = dataclasses.replace(make_lock(), donor_url=f"https://{GHP}@example.invalid/tiny.git")
    with pytest.raises(IntegrityError) as caught:
        labels(manifest, lock, "1-kvpack-x")
    assert "image labels: org.opencontainers.image.source (URL userinfo)" in caught.value.one_line()
    assert GHP not in caught.value.one_line()


def test_a_record_holding_a_credential_is_not_written(tmp_path) -> None:
    from kvbake.record import write_json_record

    record = {"image": "r/x:tag1", "plan": {"donor": "https://builder:s3cret@example.invalid/x.git"}}
    with pytest.raises(IntegrityError, match=r"^record r/x:tag1: plan\.donor \(URL userinfo\) looks like a credential"):
        write_json_record(tmp_path / "builds", "r/x:tag1", record)
    assert not (tmp_path / "builds" / "tag1.json").exists()
    clean = {"image": "r/x:tag1", "built_by": "builder@buildhost"}
    assert write_json_record(tmp_path / "builds", "r/x:tag1", clean).name == "tag1.json"
