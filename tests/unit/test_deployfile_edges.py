"""deploy.yaml edges: the host credential fix, no prose field, the heads named, the signing keys' reading and a source root's own name."""

from __future__ import annotations

import json
import locale
from pathlib import Path

import pytest

from kvbake.deployfile import Signing, check_node_launches, load_deployment
from kvbake.errors import ManifestError
from tests.unit.message_words import says
from tests.unit.test_deployfile_loading import refusal

PUBLIC = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
HEAD = {"name": "spark-a", "host": "unix:///run/a.sock", "role": "head"}
WORKER = {"name": "spark-b", "host": "unix:///run/b.sock", "role": "worker"}


def deploy_file(folder: Path, **fields) -> Path:
    path = folder / "deploy.yaml"
    path.write_text(json.dumps({"format": 1, "nodes": [HEAD, WORKER], "launcher": {"command": ["launch"], "container": "serve"}} | fields))
    return path




def with_key(folder: Path, data: bytes) -> Path:
    (folder / "alice.pub").write_bytes(data)
    return deploy_file(folder, signing={"require_signature": True, "keys": ["alice.pub"]})


def test_a_password_in_a_host_gets_the_ssh_fix(tmp_path: Path) -> None:
    err = refusal(deploy_file(tmp_path, nodes=[HEAD | {"host": "ssh://ops:pw@spark-a"}]))
    assert says(err.fix, "the key or password comes from the ssh agent or ~/.ssh/config")


def test_no_field_of_the_deployment_file_may_hold_a_newline(tmp_path: Path) -> None:
    err = refusal(deploy_file(tmp_path, description="two\nlines"))
    assert says(err.message, "description contains control character U+000A")


def test_every_head_is_named_when_there_are_two(tmp_path: Path) -> None:
    err = refusal(deploy_file(tmp_path, nodes=[HEAD, WORKER | {"role": "head"}]))
    assert says(err.message, "more than one head (spark-a, spark-b)")


def test_a_signing_section_without_keys_lists_none(tmp_path: Path) -> None:
    assert load_deployment(deploy_file(tmp_path, signing={"require_signature": True})).signing == Signing(True, ())


def test_blank_lines_before_the_key_header_are_allowed(tmp_path: Path) -> None:
    signing = load_deployment(with_key(tmp_path, ("\n  \n" + PUBLIC).encode())).signing
    assert signing.keys == ((tmp_path / "alice.pub").absolute(),)


def test_bytes_that_are_not_utf8_after_the_header_do_not_stop_the_key(tmp_path: Path) -> None:
    assert load_deployment(with_key(tmp_path, PUBLIC.encode() + b"\xff\xfe comment\n")).signing.require_signature is True


def test_a_binary_key_is_refused_as_not_a_public_key(tmp_path: Path) -> None:
    err = refusal(with_key(tmp_path, b"\x30\x82\x01\x22\xff\x00binary DER"))
    assert says(err.message, "signing key alice.pub is not a cosign public key")
    assert says(err.fix, "never the private key")


def test_a_key_is_read_as_utf8_whatever_the_locale(tmp_path: Path) -> None:
    path = with_key(tmp_path, ("\u00a0\n" + PUBLIC).encode())
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        signing = load_deployment(path).signing
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    assert signing.keys == ((tmp_path / "alice.pub").absolute(),)


def test_an_unreadable_key_says_where_keys_are_listed_from(tmp_path: Path) -> None:
    err = refusal(deploy_file(tmp_path, signing={"require_signature": True, "keys": ["gone.pub"]}))
    assert says(err.fix, "relative to the deployment file")


def test_a_mount_beside_the_sources_that_shares_their_name_s_start_is_allowed(tmp_path: Path) -> None:
    deployment = load_deployment(deploy_file(tmp_path, nodes=[HEAD | {"launch": {"cache_mounts": ["/host/cache:/srv/lib/py"]}}]))
    assert check_node_launches(deployment, (), "/srv/lib/pyX") is None
    with pytest.raises(ManifestError) as caught:
        check_node_launches(deployment, (), "/srv/lib/py/")
    assert says(caught.value.message, "cache_mounts target /srv/lib/py overlaps")
