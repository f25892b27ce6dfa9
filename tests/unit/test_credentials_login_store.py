"""Registry credentials read from the engine client's login store: identity tokens, user:password entries whose password
holds a colon, where the store is looked for, and what a credential helper is asked and may answer."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from kvbake.errors import RegistryError
from kvbake.registry.adapters.credentials import RegistryAuth, config_folder, credentials_for, lookup, read_config

REGISTRY = "127.0.0.1:5000"


def entry(text: str) -> dict:
    return {"auths": {REGISTRY: {"auth": base64.b64encode(text.encode()).decode()}}}


def test_an_identity_token_is_sent_as_the_token_user():
    found = lookup({"auths": {REGISTRY: {"identitytoken": "refresh-123", "auth": base64.b64encode(b"u:p").decode()}}}, REGISTRY)
    assert found == RegistryAuth("<token>", "refresh-123") and found.is_identity_token
    assert not RegistryAuth("pusher", "pw").is_identity_token


def test_a_password_may_hold_colons_and_an_entry_without_user_is_anonymous():
    assert lookup(entry("pusher:pa:ss:word"), REGISTRY) == RegistryAuth("pusher", "pa:ss:word")
    assert lookup(entry(":only-a-password"), REGISTRY) is None
    assert lookup({"auths": {REGISTRY: {"auth": ""}}}, REGISTRY) is None
    assert lookup({"auths": {REGISTRY: "not an object"}}, REGISTRY) is None


def test_an_entry_that_is_not_utf8_names_the_registry_and_the_login_fix():
    encoded = base64.b64encode(b"\xff\xfe:pw").decode()
    with pytest.raises(RegistryError) as failure:
        lookup({"auths": {REGISTRY: {"auth": encoded}}}, REGISTRY)
    assert REGISTRY in failure.value.message and "base64 user:password" in failure.value.message
    assert f"docker login {REGISTRY}" in failure.value.fix


def test_the_store_is_the_given_folder_else_docker_config_else_the_home_folders_docker(tmp_path, monkeypatch):
    assert config_folder(tmp_path / "given") == tmp_path / "given"
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "env"))
    assert config_folder(None) == tmp_path / "env"
    monkeypatch.delenv("DOCKER_CONFIG")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert config_folder(None) == tmp_path / "home" / ".docker"
    (tmp_path / "home" / ".docker").mkdir(parents=True)
    (tmp_path / "home" / ".docker" / "config.json").write_text(json.dumps(entry("pusher:pw")))
    assert credentials_for(REGISTRY) == RegistryAuth("pusher", "pw")


def test_a_config_that_is_not_json_is_refused_and_one_that_is_not_an_object_is_empty(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(RegistryError) as failure:
        read_config(tmp_path)
    assert "config.json" in failure.value.message and "not valid JSON" in failure.value.message
    assert "docker login" in failure.value.fix
    (tmp_path / "config.json").write_text("[1, 2]")
    assert read_config(tmp_path) == {}
    assert read_config(tmp_path / "absent") == {}


@pytest.fixture
def helper(tmp_path, monkeypatch):
    """Writes docker-credential-kvbakeask on PATH: it records what it was asked on stdin and answers `reply`."""
    def write(reply: str, code: int = 0) -> Path:
        script = tmp_path / "docker-credential-kvbakeask"
        script.write_text(f"#!/bin/sh\ncat > {tmp_path / 'asked'}\necho '{reply}'\nexit {code}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        return tmp_path / "asked"
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return write


def test_a_helper_is_asked_with_the_store_key_and_its_user_and_secret_are_used(helper):
    asked = helper(json.dumps({"Username": "pusher", "Secret": "s3cret"}))
    assert lookup({"credHelpers": {"docker.io": "kvbakeask"}}, "docker.io") == RegistryAuth("pusher", "s3cret")
    assert asked.read_text() == "https://index.docker.io/v1/"
    assert lookup({"credsStore": "kvbakeask"}, REGISTRY) == RegistryAuth("pusher", "s3cret")
    assert asked.read_text() == REGISTRY


@pytest.mark.parametrize("reply", [{"Username": "pusher"}, {"Secret": "s3cret"}, {"Username": "", "Secret": "s3cret"}, {}])
def test_a_helper_answer_without_user_or_secret_is_anonymous(helper, reply):
    helper(json.dumps(reply))
    assert lookup({"credHelpers": {REGISTRY: "kvbakeask"}}, REGISTRY) is None


def test_a_helper_that_knows_nothing_falls_back_to_the_stores_own_entry(helper):
    helper("credentials not found", code=1)
    assert lookup({"credHelpers": {REGISTRY: "kvbakeask"}}, REGISTRY) is None
    assert lookup({**entry("pusher:pw"), "credsStore": "kvbakeask"}, REGISTRY) == RegistryAuth("pusher", "pw")


def test_a_helper_answering_a_json_string_is_refused_with_the_login_fix(helper):
    helper('"just a string"')
    with pytest.raises(RegistryError) as failure:
        lookup({"credsStore": "kvbakeask"}, REGISTRY)
    assert "docker-credential-kvbakeask" in failure.value.message and "not a JSON object" in failure.value.message
    assert f"docker login {REGISTRY}" in failure.value.fix


def test_a_helper_that_cannot_be_run_names_it_in_the_fix(tmp_path, monkeypatch):
    script = tmp_path / "docker-credential-kvbakelocked"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o600)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(RegistryError) as failure:
        lookup({"credsStore": "kvbakelocked"}, REGISTRY)
    assert "cannot be run" in failure.value.message and "make docker-credential-kvbakelocked executable" in failure.value.fix
    with pytest.raises(RegistryError) as failure:
        lookup({"credsStore": "kvbakeabsent"}, REGISTRY)
    assert "not installed" in failure.value.message and "install docker-credential-kvbakeabsent" in failure.value.fix
