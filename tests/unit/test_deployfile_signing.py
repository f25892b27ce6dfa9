"""deploy.yaml's signing section: the reviewers' public keys, read and checked with the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.deployfile import Signing, load_deployment
from kvbake.errors import ManifestError

PUBLIC = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"


def deploy_file(folder: Path, **extra) -> Path:
    path = folder / "deploy.yaml"
    path.write_text(json.dumps({"format": 1, "nodes": [{"name": "a", "host": "unix:///run/a.sock", "role": "head"}],
                                "launcher": {"command": ["launch"], "container": "serve"}, **extra}))
    return path


def refusal(path: Path) -> ManifestError:
    with pytest.raises(ManifestError) as caught:
        load_deployment(path)
    return caught.value


def test_without_a_signing_section_no_signature_is_required(tmp_path):
    assert load_deployment(deploy_file(tmp_path)).signing == Signing(False, ())


def test_keys_are_read_relative_to_the_file(tmp_path):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "alice.pub").write_text(PUBLIC)
    signing = load_deployment(deploy_file(tmp_path, signing={"require_signature": True, "keys": ["keys/alice.pub"]})).signing
    assert signing == Signing(True, ((tmp_path / "keys" / "alice.pub").absolute(),))


def test_a_required_signature_with_no_key_still_loads_for_the_commands_that_check_none(tmp_path):
    assert load_deployment(deploy_file(tmp_path, signing={"require_signature": True, "keys": []})).signing == Signing(True, ())


def test_a_missing_key_file_and_a_private_key_are_refused(tmp_path):
    error = refusal(deploy_file(tmp_path, signing={"require_signature": True, "keys": ["gone.pub"]}))
    assert error.message.startswith("deploy.yaml: signing key gone.pub cannot be read") and error.exit_code == ManifestError.exit_code
    (tmp_path / "cosign.pub").write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n")
    error = refusal(deploy_file(tmp_path, signing={"require_signature": False, "keys": ["cosign.pub"]}))
    assert error.message.startswith("deploy.yaml: signing key cosign.pub is not a cosign public key")


@pytest.mark.parametrize("signing", [{"keys": ["a.pub"]}, {"require_signature": "yes"}, {"require_signature": True, "keys": ["a.key"]},
                                     {"require_signature": True, "other": 1}])
def test_the_schema_refuses_a_malformed_signing_section(tmp_path, signing):
    assert refusal(deploy_file(tmp_path, signing=signing)).message.startswith("deploy.yaml: ")


def test_init_lists_a_reviewers_key_relative_to_the_project_and_refuses_anything_else(tmp_path):
    from kvbake.errors import UsageError
    from kvbake.ship.commands import signing_key_entry

    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "alice.pub").write_text(PUBLIC)
    assert signing_key_entry(tmp_path / "keys" / "alice.pub", tmp_path / "project") == "../keys/alice.pub"
    (tmp_path / "keys" / "alice.key").write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n")
    for wrong in ("alice.key", "absent.pub"):
        with pytest.raises(UsageError) as caught:
            signing_key_entry(tmp_path / "keys" / wrong, tmp_path)
        assert caught.value.exit_code == 2 and caught.value.message.startswith(f"init: --signing-key {tmp_path / 'keys' / wrong}")
