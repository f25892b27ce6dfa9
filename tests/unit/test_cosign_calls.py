"""The cosign adapter and the keys/sign commands over a stand-in cosign program: argv, password, output, exit 19."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake.bake.core.plan import tag_for
from kvbake.errors import SignatureError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.provenance import commands
from kvbake.attest.adapters import cosign, signing
from kvbake.attest.core.slsa import provenance_predicate
from kvbake.ship.core.push_record import PUSHES_DIR

from message_words import says

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PINNED = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "ab" * 32

# The stand-in cosign: writes down its argv, the password it was given and the predicate file it was pointed at, then
# answers with FAKE_COSIGN_STDOUT / FAKE_COSIGN_STDERR and exits FAKE_COSIGN_EXIT.
FAKE_COSIGN = f"""#!{sys.executable}
import json, os, sys
argv = sys.argv[1:]
predicate = None
if "--predicate" in argv:
    with open(argv[argv.index("--predicate") + 1], encoding="utf-8") as handle:
        predicate = handle.read()
with open(os.environ["FAKE_COSIGN_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({{"argv": argv, "password": os.environ.get("COSIGN_PASSWORD"), "predicate": predicate}}) + "\\n")
sys.stdout.write(os.environ.get("FAKE_COSIGN_STDOUT", ""))
sys.stderr.write(os.environ.get("FAKE_COSIGN_STDERR", ""))
sys.exit(int(os.environ.get("FAKE_COSIGN_EXIT", "0")))
"""


class FakeCosign:
    """The stand-in program on PATH (KVBAKE_COSIGN and COSIGN_PASSWORD unset) and what it was asked."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        folder.mkdir()
        self.path, self.log, self.monkeypatch = folder / "cosign", folder / "calls.jsonl", monkeypatch
        self.path.write_text(FAKE_COSIGN, encoding="utf-8")
        self.path.chmod(0o755)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
        monkeypatch.setenv("FAKE_COSIGN_LOG", str(self.log))
        monkeypatch.delenv(cosign.BINARY_ENV, raising=False)
        monkeypatch.delenv(cosign.PASSWORD_ENV, raising=False)

    def answers(self, stdout: str = "", stderr: str = "", code: int = 0) -> None:
        self.monkeypatch.setenv("FAKE_COSIGN_STDOUT", stdout)
        self.monkeypatch.setenv("FAKE_COSIGN_STDERR", stderr)
        self.monkeypatch.setenv("FAKE_COSIGN_EXIT", str(code))

    @property
    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        # `cosign sign --help` (or attest) only tells the generation apart (tests/unit/test_cosign_generations.py)
        return [call for call in map(json.loads, self.log.read_text(encoding="utf-8").splitlines()) if call["argv"][-1:] != ["--help"]]


@pytest.fixture()
def fake(tmp_path, monkeypatch) -> FakeCosign:
    # the registry's signature tags are read and put back by signature_tags (tests/unit/test_signature_tags.py and the
    # real registry in tests/integration/test_sign.py); here no registry runs
    monkeypatch.setattr(signing, "all_or_nothing", lambda reference: contextlib.nullcontext())
    return FakeCosign(tmp_path / "bin", monkeypatch)


def signature_error(call) -> SignatureError:
    with pytest.raises(SignatureError) as caught:
        call()
    assert caught.value.exit_code == 19
    return caught.value


def test_kvbake_cosign_names_the_program_before_path_and_a_missing_one_is_named(fake, tmp_path, monkeypatch):
    assert cosign.cosign_binary() == shutil.which("cosign") == str(fake.path)
    chosen = tmp_path / "chosen-cosign"
    chosen.write_text(FAKE_COSIGN, encoding="utf-8")
    chosen.chmod(0o755)
    monkeypatch.setenv(cosign.BINARY_ENV, str(chosen))
    assert cosign.cosign_binary() == str(chosen)
    chosen.chmod(0o644)
    error = signature_error(cosign.cosign_binary)
    assert f"cosign is not installed at {chosen}" in error.message and error.fix.startswith("install cosign 2.5 or later")


def test_without_cosign_on_path_the_developers_unpacked_copy_is_used_else_none(tmp_path, monkeypatch):
    monkeypatch.delenv(cosign.BINARY_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    unpacked = tmp_path / "tools" / "cosign"
    monkeypatch.setattr(cosign, "CACHED", unpacked)
    error = signature_error(cosign.cosign_binary)
    assert "cosign is not installed" in error.message and " at " not in error.message, "no KVBAKE_COSIGN path to name"
    unpacked.parent.mkdir()
    unpacked.write_text(FAKE_COSIGN, encoding="utf-8")
    unpacked.chmod(0o755)
    assert cosign.cosign_binary() == str(unpacked)


def test_the_password_is_the_environments_even_empty_else_asked_on_a_terminal_only(monkeypatch):
    monkeypatch.setenv(cosign.PASSWORD_ENV, "")
    assert cosign.password() == ""
    monkeypatch.setenv(cosign.PASSWORD_ENV, "s3cret")
    assert cosign.password() == "s3cret"
    monkeypatch.delenv(cosign.PASSWORD_ENV)
    monkeypatch.setattr(cosign.sys, "stdin", SimpleNamespace(isatty=lambda: False))
    monkeypatch.setattr(cosign.getpass, "getpass", lambda prompt: pytest.fail("asked without a terminal"))
    error = signature_error(cosign.password)
    assert "password is not given" in error.message and error.fix.startswith("set COSIGN_PASSWORD") and says(error.fix, "run on a terminal")
    prompts = []
    monkeypatch.setattr(cosign.sys, "stdin", SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr(cosign.getpass, "getpass", lambda prompt: prompts.append(prompt) or "typed")
    assert cosign.password() == "typed" and prompts == ["cosign key password: "]


def test_a_key_pair_is_made_with_the_password_in_the_environment_only(fake, tmp_path):
    key, pub = cosign.generate_key_pair(tmp_path / "keys" / "release", "pw")
    assert (key, pub) == (tmp_path / "keys" / "release.key", tmp_path / "keys" / "release.pub")
    assert fake.calls == [{"argv": ["generate-key-pair", "--output-key-prefix", str(tmp_path / "keys" / "release")], "password": "pw",
                           "predicate": None}]


@pytest.mark.parametrize("existing", ["release.key", "release.pub"])
def test_an_existing_key_file_is_never_overwritten(fake, tmp_path, existing):
    (tmp_path / existing).write_text("old")
    error = signature_error(lambda: cosign.generate_key_pair(tmp_path / "release", "pw"))
    assert str(tmp_path / existing) in error.message and "never overwritten" in error.message and fake.calls == []
    assert says(error.fix, "give another --out folder or name")


def test_signing_uploads_no_transparency_log_and_allows_plain_http_on_loopback_only(fake, tmp_path):
    cosign.sign("127.0.0.1:5000/r@sha256:" + "a" * 64, tmp_path / "k.key", "pw")
    cosign.sign("registry.lan/r@sha256:" + "a" * 64, tmp_path / "k.key", "pw")
    assert [call["argv"] for call in fake.calls] == [
        ["sign", "--key", str(tmp_path / "k.key"), "--tlog-upload=false", "--yes", "--allow-http-registry", "127.0.0.1:5000/r@sha256:" + "a" * 64],
        ["sign", "--key", str(tmp_path / "k.key"), "--tlog-upload=false", "--yes", "registry.lan/r@sha256:" + "a" * 64]]
    assert [call["password"] for call in fake.calls] == ["pw", "pw"]


def test_the_attestation_carries_the_predicate_as_sorted_json_in_a_file_that_does_not_outlive_the_call(fake, tmp_path):
    cosign.attest("localhost:5000/r@sha256:" + "a" * 64, tmp_path / "k.key", "pw", {"b": 1, "a": [2]}, "slsaprovenance")
    (call,) = fake.calls
    path = call["argv"][call["argv"].index("--predicate") + 1]
    assert call["argv"] == ["attest", "--key", str(tmp_path / "k.key"), "--type", "slsaprovenance", "--predicate", path, "--tlog-upload=false",
                            "--yes", "--allow-http-registry", "localhost:5000/r@sha256:" + "a" * 64]
    assert call["predicate"] == '{"a": [2], "b": 1}' and call["password"] == "pw"
    assert Path(path).name == "predicate.json" and Path(path).parent.name.startswith("kvbake-attest-") and not Path(path).exists()


def test_verifying_reads_cosigns_json_without_a_password_or_a_transparency_log(fake, tmp_path, monkeypatch):
    fake.answers(stdout='[{"critical": {"image": {"docker-manifest-digest": "sha256:1"}}}]\n')
    found = cosign.verify("registry.lan/r@sha256:1", tmp_path / "k.pub")
    assert found == [{"critical": {"image": {"docker-manifest-digest": "sha256:1"}}}]
    fake.answers(stdout='{"payloadType": "a"}\n\n{"payloadType": "b"}\n')
    assert cosign.verify_attestation("[::1]:5000/r@sha256:1", tmp_path / "k.pub", "slsaprovenance") == [{"payloadType": "a"}, {"payloadType": "b"}]
    assert [call["argv"] for call in fake.calls] == [
        ["verify", "--key", str(tmp_path / "k.pub"), "--insecure-ignore-tlog", "registry.lan/r@sha256:1"],
        ["verify-attestation", "--key", str(tmp_path / "k.pub"), "--type", "slsaprovenance", "--insecure-ignore-tlog", "--allow-http-registry",
         "[::1]:5000/r@sha256:1"]]
    assert [call["password"] for call in fake.calls] == [None, None]


def test_a_failing_cosign_is_exit_19_with_its_last_said_line_or_its_exit_code(fake, tmp_path):
    fake.answers(stderr="Error: signing\nError: no matching signatures: invalid key\n\n", code=1)
    error = signature_error(lambda: cosign.verify("registry.lan/r@sha256:1", tmp_path / "other.pub"))
    assert "could not verify the signature of registry.lan/r@sha256:1 with other.pub" in error.message
    assert "(Error: no matching signatures: invalid key)" in error.message and says(error.fix, "its password and the registry") and error.fix.startswith("read cosign's reason")
    fake.answers(code=3)
    assert "(exit code 3)" in signature_error(lambda: cosign.sign("r@sha256:1", tmp_path / "k.key", "pw")).message


def test_cosign_runs_with_no_input_and_its_output_captured_as_text(monkeypatch, tmp_path):
    runs = []

    def run(argv, **kwargs):
        runs.append((argv, kwargs))
        return subprocess.CompletedProcess(argv, 0, "out", "")
    monkeypatch.setenv(cosign.BINARY_ENV, sys.executable)
    monkeypatch.setenv(cosign.PASSWORD_ENV, "from-the-environment")
    monkeypatch.setattr(cosign.subprocess, "run", run)
    assert cosign.run_cosign(["version"], "say its version") == "out"
    assert cosign.run_cosign(["x"], "x", "given") == "out"
    (argv, kwargs), (_, second) = runs
    assert argv == [sys.executable, "version"]
    assert {key: value for key, value in kwargs.items() if key != "env"} == {"capture_output": True, "text": True, "check": False,
                                                                             "stdin": subprocess.DEVNULL}
    assert kwargs["env"]["COSIGN_PASSWORD"] == "from-the-environment" and second["env"]["COSIGN_PASSWORD"] == "given"
    assert kwargs["env"]["PATH"] == os.environ["PATH"]


def test_keys_checks_for_cosign_before_asking_a_password_and_writes_into_a_new_folder(fake, tmp_path, monkeypatch):
    monkeypatch.setenv(cosign.PASSWORD_ENV, "pw")
    data, text = commands.cmd_keys(Namespace(out=tmp_path / "new" / "keys", name="release"))
    assert (tmp_path / "new" / "keys").is_dir()
    assert data == {"private_key": str(tmp_path / "new" / "keys" / "release.key"), "public_key": str(tmp_path / "new" / "keys" / "release.pub")}
    assert "signing.keys" in text and fake.calls[0]["argv"][-1] == str(tmp_path / "new" / "keys" / "release")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(cosign, "CACHED", tmp_path / "absent")
    monkeypatch.delenv(cosign.PASSWORD_ENV)
    monkeypatch.setattr(cosign.sys, "stdin", SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr(cosign.getpass, "getpass", lambda prompt: pytest.fail("a password was asked before cosign was found"))
    assert "not installed" in signature_error(lambda: commands.cmd_keys(Namespace(out=tmp_path / "k", name="n"))).message
    assert not (tmp_path / "k").exists()


def pushed_standin(tmp_path: Path) -> Path:
    """A copy of the stand-in example (without overlay/) whose locked release has a push record naming PINNED."""
    root = tmp_path / "standin"
    shutil.copytree(EXAMPLES / "standin", root, ignore=shutil.ignore_patterns("overlay", ".kvbake"))
    manifest = load_manifest(root / "manifest.yaml")
    (root / PUSHES_DIR).mkdir(parents=True)
    (root / PUSHES_DIR / f"{tag_for(manifest, read_lock(manifest))}.json").write_text(json.dumps({"pinned": PINNED}))
    return root


def test_sign_signs_the_pushed_digest_then_attests_the_locks_provenance(fake, tmp_path, monkeypatch):
    root = pushed_standin(tmp_path)
    lock = read_lock(load_manifest(root / "manifest.yaml"))
    monkeypatch.setenv(cosign.PASSWORD_ENV, "pw")
    (tmp_path / "release.key").write_text(f"{cosign.PRIVATE_KEY_HEADERS[0]}\nAAAA\n")
    data, text = commands.cmd_sign(Namespace(manifest=root / "manifest.yaml", key=tmp_path / "release.key"))
    assert data == {"image": PINNED, "key": str(tmp_path / "release.key"), "attestation": "slsaprovenance", "materials": 9}
    assert "release.key" in text and "9 materials" in text and "7 patches" in text
    opened, signed, attested = fake.calls
    assert opened["argv"] == ["public-key", "--key", str(tmp_path / "release.key")] and opened["password"] == "pw"
    assert signed["argv"][0] == "sign" and signed["argv"][-1] == PINNED and signed["password"] == "pw"
    assert attested["argv"][0] == "attest" and attested["argv"][-1] == PINNED and attested["password"] == "pw"
    assert json.loads(attested["predicate"]) == provenance_predicate(lock, "manifest.yaml")


def test_sign_checks_for_cosign_before_asking_a_password(tmp_path, monkeypatch):
    root = pushed_standin(tmp_path)
    monkeypatch.delenv(cosign.BINARY_ENV, raising=False)
    monkeypatch.delenv(cosign.PASSWORD_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(cosign, "CACHED", tmp_path / "absent")
    monkeypatch.setattr(cosign.sys, "stdin", SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr(cosign.getpass, "getpass", lambda prompt: pytest.fail("a password was asked before cosign was found"))
    error = signature_error(lambda: commands.cmd_sign(Namespace(manifest=root / "manifest.yaml", key=tmp_path / "k.key")))
    assert says(error.message, "cosign is not installed")


def test_a_failed_key_pair_or_attestation_check_says_which_step_failed(fake, tmp_path):
    fake.answers(stderr="Error: boom\n", code=1)
    assert says(signature_error(lambda: cosign.generate_key_pair(tmp_path / "k", "pw")).message, "cosign could not make a key pair (Error: boom)")
    error = signature_error(lambda: cosign.verify_attestation("r@sha256:1", tmp_path / "k.pub", "slsaprovenance"))
    assert says(error.message, "could not verify the attestation of r@sha256:1 with k.pub")


def test_keys_passes_the_typed_password_and_writes_into_an_existing_folder(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(cosign.sys, "stdin", SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr(cosign.getpass, "getpass", lambda prompt: "typed")
    (tmp_path / "keys").mkdir()
    commands.cmd_keys(Namespace(out=tmp_path / "keys", name="release"))
    assert [call["password"] for call in fake.calls] == ["typed"]


def test_sign_refuses_a_missing_or_foreign_key_and_a_wrong_password_before_anything_is_signed(fake, tmp_path, monkeypatch):
    root = pushed_standin(tmp_path)
    monkeypatch.setenv(cosign.PASSWORD_ENV, "pw")

    def sign(key: Path) -> SignatureError:
        return signature_error(lambda: commands.cmd_sign(Namespace(manifest=root / "manifest.yaml", key=key)))

    assert says(sign(tmp_path / "absent.key").message, f"signing key {tmp_path / 'absent.key'} not found")
    foreign = tmp_path / "id_ed25519"
    foreign.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n")
    assert sign(foreign).message.startswith(f"{foreign} is not a cosign private key")
    assert fake.calls == [], "nothing reached cosign"
    older = tmp_path / "older.key"
    older.write_text(f"{cosign.PRIVATE_KEY_HEADERS[1]}\nAAAA\n")
    fake.answers(stderr="Error: reading key: decrypt: encrypted: decryption failed\n", code=1)
    error = sign(older)
    assert error.message.startswith("the password does not open older.key") and "pw" not in error.one_line()
    assert [call["argv"][0] for call in fake.calls] == ["public-key"], "a wrong password signs nothing"


def test_cosign_3_gets_the_old_signature_format_for_sign_and_attest_as_each_command_s_own_help_says(tmp_path, monkeypatch):
    program, log = tmp_path / "cosign3", tmp_path / "calls.txt"
    program.write_text(f'#!/bin/sh\nif [ "$2" = "--help" ]; then\n  case "$1" in sign|attest) echo "  --use-signing-config=true:";; esac\n'
                       f'  exit 0\nfi\necho "$@" >> {log}\n')
    program.chmod(0o755)
    monkeypatch.setenv(cosign.BINARY_ENV, str(program))
    cosign.sign("registry.lan/r@sha256:1", tmp_path / "k.key", "pw")
    cosign.attest("registry.lan/r@sha256:1", tmp_path / "k.key", "pw", {}, "slsaprovenance")
    signed, attested = log.read_text().splitlines()
    assert "--use-signing-config=false" in signed.split() and "--new-bundle-format=false" in signed.split()
    assert "--use-signing-config=false" in attested.split() and "--new-bundle-format=false" in attested.split()


def test_a_failed_signature_or_attestation_names_the_step_and_the_reference(fake, tmp_path):
    fake.answers(stderr="Error: denied\n", code=1)
    assert says(signature_error(lambda: cosign.sign("r@sha256:1", tmp_path / "k.key", "pw")).message, "could not sign r@sha256:1")
    attest = signature_error(lambda: cosign.attest("r@sha256:1", tmp_path / "k.key", "pw", {}, "slsaprovenance"))
    assert says(attest.message, "could not attest r@sha256:1")


def test_the_password_is_checked_with_the_one_given_not_the_environment_s(fake, tmp_path, monkeypatch):
    monkeypatch.setenv(cosign.PASSWORD_ENV, "from-the-environment")
    cosign.check_password(tmp_path / "k.key", "given")
    assert fake.calls == [{"argv": ["public-key", "--key", str(tmp_path / "k.key")], "password": "given", "predicate": None}]
    fake.answers(stderr="Error: decryption failed\n", code=1)
    error = signature_error(lambda: cosign.check_password(tmp_path / "k.key", "wrong"))
    assert "k.key" in error.message and says(error.fix, "COSIGN_PASSWORD")


def test_a_key_file_is_read_past_leading_blank_lines_and_bytes_that_are_no_text(tmp_path):
    padded = tmp_path / "padded.key"
    padded.write_text(f"\n\n  {cosign.PRIVATE_KEY_HEADERS[0]}\nAAAA\n")
    cosign.check_private_key(padded)
    binary = tmp_path / "binary.key"
    binary.write_bytes(b"\xff\xfe\x00garbage" * 20)
    error = signature_error(lambda: cosign.check_private_key(binary))
    assert str(binary) in error.message and "SIGSTORE PRIVATE KEY" in error.message and says(error.fix, "--key")


def test_a_missing_or_unreadable_key_file_is_named_with_the_reason(tmp_path):
    missing = signature_error(lambda: cosign.check_private_key(tmp_path / "absent.key"))
    assert str(tmp_path / "absent.key") in missing.message and says(missing.fix, "--key")
    (tmp_path / "folder.key").mkdir()
    unreadable = signature_error(lambda: cosign.check_private_key(tmp_path / "folder.key"))
    assert str(tmp_path / "folder.key") in unreadable.message and says(unreadable.message, "Is a directory") and says(unreadable.fix, "--key")


def test_the_developers_copy_must_be_a_file(tmp_path, monkeypatch):
    monkeypatch.delenv(cosign.BINARY_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    (tmp_path / "tools").mkdir()
    monkeypatch.setattr(cosign, "CACHED", tmp_path / "tools")
    assert says(signature_error(cosign.cosign_binary).message, "cosign is not installed")


def test_sign_uses_the_typed_password_and_the_given_key_throughout_and_undoes_by_the_pushed_reference(fake, tmp_path, monkeypatch):
    root = pushed_standin(tmp_path)
    guarded = []
    monkeypatch.setattr(signing, "all_or_nothing", lambda reference: guarded.append(reference) or contextlib.nullcontext())
    monkeypatch.setattr(cosign.sys, "stdin", SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr(cosign.getpass, "getpass", lambda prompt: "typed")
    key = tmp_path / "release.key"
    key.write_text(f"{cosign.PRIVATE_KEY_HEADERS[0]}\nAAAA\n")
    commands.cmd_sign(Namespace(manifest=root / "manifest.yaml", key=key))
    assert [call["password"] for call in fake.calls] == ["typed"] * 3
    assert [call["argv"][call["argv"].index("--key") + 1] for call in fake.calls] == [str(key)] * 3
    assert guarded == [PINNED]
