"""More of the ship commands' own choices: push --sign, held and untested presets, deploy's answer, the real fleet, a key's encoding."""

from __future__ import annotations

import json
import locale
from pathlib import Path

import pytest

from kvbake import cli
from kvbake.errors import UsageError
from kvbake.lock import read_lock
from kvbake.bake.core.provenance import switch_names
from kvbake.manifest import load_manifest
from kvbake.serve.core.presets import choose_preset
from kvbake.attest.core.slsa import provenance_predicate
from kvbake.attest.adapters import signing
from kvbake.ship import commands
from kvbake.ship.adapters import fleet as fleet_module
from kvbake.ship.adapters.fleet import Fleet, make_fleet
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.rollout import who_deploys
from kvbake.ship.core.push_record import pushed_image
from kvbake.ship.core.release import make_release

from fake_fleet import REPO, SOURCE_ROOT, deploy, interrupted_deploy, release
from message_words import says
from test_cli_recover import killed_before_any_node, options, run, world  # noqa: F401  (fixtures: the fake fleet and this host's options)
from test_admission_gate import DIGEST, StandInCosign, envelope
from test_deploy_dry_run import IMAGE
from test_deploy_dry_run import project as dry_run_folder
from test_deployfile_signing import PUBLIC
from test_push_command import built, push  # noqa: F401  (fixture: the tiny project built on a pushing engine)
from test_ship_commands_mutants import key_file, stale_locks
from test_ship_records import PINNED, current_records, offered, project  # noqa: F401  (fixture: the stand-in over fake nodes)

HELD, UNTESTED = "longctx-524288", "longctx-1048576"
REASON = "supervised window"
FLAGGED = [(HELD, "--allow-held"), (UNTESTED, "--allow-untested")]


@pytest.fixture()
def switched(project, monkeypatch: pytest.MonkeyPatch):
    """The stand-in over fake nodes whose fleet declares the manifest's switches (its presets set them)."""
    monkeypatch.setattr(fleet_module, "make_fleet", lambda deployment, manifest, lock: Fleet(
        deployment, project.world.engines, REPO, switch_names(manifest), (f"{SOURCE_ROOT}/x.py",), SOURCE_ROOT))
    return project


# -- push --sign ---------------------------------------------------------------------------------------------------

class StandInSigning:
    """cosign's side of push --sign: the key opened (noting what the registry held then) and the pushed image signed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, engine) -> None:
        self.engine, self.opened, self.signed = engine, [], []
        monkeypatch.setattr(signing, "opened_key", self.opened_key)
        monkeypatch.setattr(signing, "sign_pushed", self.sign_pushed)

    def opened_key(self, key: Path) -> str:
        self.opened.append((key, dict(self.engine.registry.manifests)))
        return "pass phrase"

    def sign_pushed(self, reference: str, lock, manifest_name: str, key: Path, secret: str):
        self.signed.append((reference, lock, manifest_name, key, secret))
        return {"image": "signed image", "key": str(key)}, f"signed with {key.name}"


def test_push_sign_opens_the_key_before_anything_is_pushed_then_signs_with_it(built, capsys, monkeypatch, tmp_path):
    engine, manifest, _ = built
    cosign = StandInSigning(monkeypatch, engine)
    key = tmp_path / "alice.key"
    code, out, err = push(capsys, manifest, "--sign", str(key), "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["status"] == "pushed" and answer["signed"] == {"image": "signed image", "key": str(key)}
    assert cosign.opened == [(key, {})]
    lock = read_lock(manifest)
    assert cosign.signed == [(pushed_image(manifest, lock).pinned, lock, manifest.path.name, key, "pass phrase")]


def test_push_sign_says_what_signing_said(built, capsys, monkeypatch, tmp_path):
    engine, manifest, _ = built
    StandInSigning(monkeypatch, engine)
    code, out, err = push(capsys, manifest, "--sign", str(tmp_path / "alice.key"))
    assert code == 0, err
    assert out.splitlines()[-1].startswith("signed:") and says(out, "signed with alice.key")


# -- held and untested presets -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("preset", "flag"), FLAGGED)
def test_deploy_of_a_held_or_untested_preset_with_its_flag_records_the_override_reason_and_deployer(switched, capsys, preset, flag):
    project = switched
    offered(project, PINNED)
    code, answer, err = run(capsys, "deploy", "--preset", preset, flag, "--reason", REASON, "--json", *project.argv)
    assert code == 0, err
    assert answer["preset"] == preset
    for current in current_records(project.world).values():
        assert (current.preset, current.override, current.reason, current.deployed_by) == (preset, f"{flag}: {REASON}", REASON, who_deploys())


@pytest.mark.parametrize(("preset", "flag"), FLAGGED)
def test_deploy_resume_of_a_held_or_untested_preset_takes_its_flag_and_reason(switched, capsys, preset, flag):
    manifest, lock, world = switched.manifest, switched.lock, switched.world
    chosen = choose_preset(manifest, preset, flag == "--allow-held", flag == "--allow-untested", REASON)
    interrupted = make_release(pushed_image(manifest, lock, PINNED), chosen, manifest, REASON, "ops@host")
    world.offer(interrupted)
    interrupted_deploy(world, interrupted, manifest.base.node_name, lock.base.diff_ids)
    world.advance(world.fleet.deployment.lock_stale_after_s)
    code, answer, err = run(capsys, "deploy", "--resume", "--preset", preset, flag, "--reason", REASON, "--break-lock", "--json", *switched.argv)
    assert code == 0 and answer["action"] == "resumed", err
    assert {node["records"][0] for node in world.snapshot()["nodes"].values()} == {interrupted.id}


@pytest.mark.parametrize(("preset", "flag"), FLAGGED)
def test_a_dry_run_of_a_held_or_untested_preset_with_its_flag_launches_from_the_manifests_repository(tmp_path, capsys, preset, flag):
    folder = dry_run_folder(tmp_path)
    code = cli.main(["deploy", "--dry-run", "--preset", preset, flag, "--reason", REASON, "--image", IMAGE, "--json",
                     "--manifest", str(folder / "manifest.yaml"), "--deploy", str(folder / "deploy.yaml")])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    repository = load_manifest(folder / "manifest.yaml").output.repository
    assert data["preset"] == preset
    assert {node["variables"]["KVBAKE_IMAGE"] for node in data["nodes"]} == {f"{repository}:current"}


# -- deploy's answer and options -----------------------------------------------------------------------------------

def test_deploy_answers_its_journal_preset_switches_and_nodes_and_records_no_reason_when_none_is_given(project, capsys):
    offered(project, PINNED)
    code, answer, err = run(capsys, "deploy", "--preset", "control", "--json", *project.argv)
    assert code == 0, err
    assert answer["journal"].startswith("deploy-") and answer["preset"] == "control"
    assert answer["switches"] == {} and answer["nodes"] == ["a", "b"]
    assert {current.reason for current in current_records(project.world).values()} == {""}


def test_deploy_with_break_lock_breaks_a_stale_lock(project, capsys):
    offered(project, PINNED)
    stale_locks(project.world, "base:1")  # every node holds the base
    code, answer, err = run(capsys, "deploy", "--preset", "control", "--break-lock", "--json", *project.argv)
    assert code == 0, err
    assert {current.id for current in current_records(project.world).values()} == {answer["release"]}


def test_deploy_names_every_unknown_reseat_node_and_where_to_look(project):
    args = cli.parse_args(["deploy", "--preset", "control", "--reseat", "y", "--reseat", "x", *project.argv], "build.py")
    with pytest.raises(UsageError) as caught:
        commands.cmd_deploy(args)
    assert says(caught.value.message, "--reseat x, y") and says(caught.value.fix, "build.py deploy --help")


def test_deploy_revert_of_a_deploy_that_never_began_answers_its_journal(world, options, capsys):
    deploy(world, release("control", {}))
    killed_before_any_node(world)
    journal = world.snapshot()["journal"]
    code, answer, err = run(capsys, "deploy", "--revert", "--break-lock", "--json", *options)
    assert code == 0, err
    assert answer == {"journal": journal.id, "action": "dropped"}


def signature_required(project) -> None:
    """The deployment file lists alice.pub, beside it, and requires a signature."""
    path = Path(project.argv[project.argv.index("--deploy") + 1])
    document = json.loads(path.read_text())
    (path.parent / "alice.pub").write_text(PUBLIC)
    path.write_text(json.dumps({**document, "signing": {"require_signature": True, "keys": ["alice.pub"]}}))


def test_deploy_admits_only_an_attestation_holding_the_locks_materials(project, capsys, monkeypatch):
    assert PINNED.endswith(DIGEST)
    offered(project, PINNED)
    signature_required(project)
    materials = provenance_predicate(project.lock, project.manifest.path.name)["materials"]
    for attested, admitted in ((materials[1:], False), (materials, True)):
        StandInCosign(monkeypatch, {"alice.pub": [DIGEST]},
                      {"alice.pub": [envelope(config=project.lock.derived.image_id, materials=attested)]})
        code, answer, err = run(capsys, "deploy", "--preset", "control", "--json", *project.argv)
        assert (code == 0) == admitted, err
        assert admitted or says(err, "materials are not the lock's")
    assert {current.signed_by["key"] for current in current_records(project.world).values()} == {"alice.pub"}


# -- the real fleet, and a rank with two switches ------------------------------------------------------------------

def test_the_real_fleet_takes_the_manifests_repository_and_the_locks_source_root(world, options, capsys, monkeypatch):
    monkeypatch.setattr(fleet_module, "make_fleet", make_fleet)
    monkeypatch.setattr(fleet_module, "connect", lambda deployment: world.engines)
    args = cli.parse_args(["status", *options], "build.py")
    manifest, lock, _, fleet = commands._ship_context(args)
    assert fleet.tag("current") == f"{manifest.output.repository}:current" and fleet.source_root == lock.source_root
    code, answer, err = run(capsys, "status", "--json", *options)
    assert code == 0, err
    assert [row["node"] for row in answer["nodes"]] == ["a", "b"]


def test_verify_running_lists_two_switches_comma_separated(world, options, capsys, monkeypatch):
    world.fleet = Fleet(world.fleet.deployment, world.engines, REPO, ("S", "T"), (f"{SOURCE_ROOT}/x.py",), SOURCE_ROOT)
    two = release("two", {"S": "3", "T": "1"})
    world.offer(two, {"Env": []})
    deploy(world, two)
    monkeypatch.setattr(fleet_module, "make_fleet", lambda deployment, manifest, lock: world.fleet)
    code = cli.main(["verify-running", *options])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert says(out, "switches S=3,T=1")


# -- a signing key's encoding --------------------------------------------------------------------------------------

def test_a_public_key_after_a_utf8_no_break_space_is_listed_under_an_ascii_locale(tmp_path):
    """Read as ASCII, the no-break space would be two replacement characters before the header, not blank."""
    path = key_file(tmp_path, "alice.pub", "\u00a0\n".encode() + PUBLIC.encode())
    saved = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        entry = commands.signing_key_entry(path, tmp_path / "project")
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)
    assert entry == "../alice.pub"
