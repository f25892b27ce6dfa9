"""The ship commands' own choices over fake nodes: adopt's answer, recovery and release, stale locks broken when asked, init's refusals and keys."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake import cli
from kvbake.errors import DivergedError, RolloutError, UsageError
from kvbake.ship import commands
from kvbake.ship.adapters import fleet as fleet_module
from kvbake.ship.adapters.node_locks import HELD_HERE, NodeLock
from kvbake.ship.adapters.nodestate import NodeState, node_audit

from fake_fleet import CONTAINER, CONTROL, PACKING, SOURCE_ROOT, World, deploy, diverged_deploy, killed_adopt, start_serves
from message_words import says
from test_cli_recover import options, run, settled, world  # noqa: F401  (fixtures: the fake fleet and this host's options)
from test_deployfile_signing import PUBLIC
from test_project_init_nodes import nodes, pair, run_init, written  # noqa: F401  (fixture: stand-in node engines)


def stale_locks(w: World, image: str) -> None:
    """Every node keeps a lock whose holder, a command of this process, is gone: stale, broken only with --break-lock."""
    for name, engine in w.engines.items():
        lock = NodeLock(name, engine, w.fleet.deployment.lock_stale_after_s, node_audit(name))
        lock.acquire(image, "deploy-gone", False, lambda claim: "")
        HELD_HERE.discard(lock.token)
    w.advance(w.fleet.deployment.lock_stale_after_s + 1)


# -- adopt ---------------------------------------------------------------------------------------------------------

def test_adopt_answers_the_release_and_each_nodes_container_name_shape_and_changes(world, options, capsys):
    ids = start_serves(world)
    world.engines["a"].containers[CONTAINER]["Changes"] = {f"{SOURCE_ROOT}/vllm/x.py": "C"}
    code, answer, err = run(capsys, "adopt", "--reason", "the serve before kvbake", "--json", *options)
    assert code == 0, err
    current = {name: NodeState(name, engine).read().current for name, engine in world.engines.items()}
    assert answer["release"] == current["a"].id
    assert answer["nodes"]["a"] == {"container": ids["a"], "name": CONTAINER, "shape": "main", "changes": [f"{SOURCE_ROOT}/vllm/x.py"]}
    assert answer["nodes"]["b"] == {"container": ids["b"], "name": CONTAINER, "shape": "main", "changes": []}
    assert {record.reason for record in current.values()} == {"the serve before kvbake"}


def test_adopt_of_a_named_container_adopts_that_container(world, options, capsys):
    ids = start_serves(world, names={"a": "hand-serve", "b": "hand-serve"})
    code, answer, err = run(capsys, "adopt", "--container", "hand-serve", "--json", *options)
    assert code == 0, err
    assert {node: (n["name"], n["container"]) for node, n in answer["nodes"].items()} == {
        "a": ("hand-serve", ids["a"]), "b": ("hand-serve", ids["b"])}


def test_adopt_with_break_lock_breaks_a_stale_lock(world, options, capsys):
    start_serves(world)
    stale_locks(world, "base:1")
    code, answer, err = run(capsys, "adopt", "--break-lock", "--json", *options)
    assert code == 0, err
    assert NodeState("a", world.engines["a"]).read().current.id == answer["release"] and settled(world)


def unreachable_node(deployment, manifest, lock):
    raise RolloutError("node b: unix:///b is unreachable", "bring the node's engine back, or fix its host in the deployment file, then retry; nothing was changed")


def test_adopt_on_a_diverged_deployment_is_refused_before_any_node_is_reached(world, options, capsys, monkeypatch):
    deploy(world, CONTROL)
    diverged_deploy(world, PACKING)
    before = world.snapshot()
    monkeypatch.setattr(fleet_module, "make_fleet", unreachable_node)
    for mode in ([], ["--resume"]):
        code, _, _ = run(capsys, "adopt", *mode, "--break-lock", *options)
        assert code == DivergedError.exit_code
    assert world.snapshot() == before


def test_adopt_revert_of_an_adopt_that_never_began_drops_it(world, options, capsys):
    start_serves(world)
    before = world.snapshot()
    killed_adopt(world, 1)  # only this host's journal was written
    world.advance(world.fleet.deployment.lock_stale_after_s)
    code, answer, err = run(capsys, "adopt", "--revert", "--break-lock", "--json", *options)
    assert code == 0, err
    assert answer["action"] == "dropped"
    assert world.snapshot() == before


def test_adopt_revert_of_an_adopt_that_never_began_says_dropped(world, options, capsys):
    start_serves(world)
    killed_adopt(world, 1)
    world.advance(world.fleet.deployment.lock_stale_after_s)
    code = cli.main(["adopt", "--revert", "--break-lock", *options])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("dropped adopt adopt-")


def adopted_then_deployed(world: World, options: list[str], capsys) -> None:
    """The hand serve adopted, then a kvbake release deployed over it: the adopted one is only kept, so it can be released."""
    start_serves(world)
    code, _, err = run(capsys, "adopt", "--json", *options)
    assert code == 0, err
    deploy(world, CONTROL)


def test_adopt_release_answers_the_nodes_it_released(world, options, capsys):
    adopted_then_deployed(world, options, capsys)
    code, answer, err = run(capsys, "adopt", "--release", "--json", *options)
    assert code == 0, err
    assert answer == {"released": ["a", "b"]}
    assert all(NodeState(name, engine).read().adopted is None for name, engine in world.engines.items())


def test_adopt_release_names_the_nodes_it_released(world, options, capsys):
    adopted_then_deployed(world, options, capsys)
    code = cli.main(["adopt", "--release", *options])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert says(out, "a, b")


def test_adopt_release_with_break_lock_breaks_a_stale_lock(world, options, capsys):
    adopted_then_deployed(world, options, capsys)
    stale_locks(world, world.fleet.tag("current"))
    code, answer, err = run(capsys, "adopt", "--release", "--break-lock", "--json", *options)
    assert code == 0, err
    assert answer == {"released": ["a", "b"]}


def adopted_release(changes: list[str], auto_remove: bool = False, execd: bool = False, switches: dict | None = None):
    """One node's adopted release as adopt returns it: the fields adopt's report reads."""
    adopted = {"name": "hand-serve", "container_id": "c0ffee" * 10, "shape": "exec" if execd else "main", "exec": execd,
               "changes": changes, "spec": {"host": {"AutoRemove": True} if auto_remove else {}}}
    return SimpleNamespace(adopted=adopted, image="base:1", switches=switches or {}, max_model_len=4096, id="adopted-1")


def test_adopt_report_shows_twelve_characters_of_the_container_id():
    _, text = commands.adopt_report({"a": adopted_release([])})
    assert says(text, "c0ffee" * 2) and "c0ffee" * 2 + "c" not in text


@pytest.mark.parametrize(("execd", "shape"), [(True, "vLLM started by docker exec"), (False, "vLLM runs as its main process")])
def test_adopt_report_names_how_vllm_runs(execd, shape):
    _, text = commands.adopt_report({"a": adopted_release([], execd=execd)})
    assert says(text, shape)


def test_adopt_report_says_a_ray_worker_runs_no_vllm_of_its_own():
    worker = adopted_release([])
    worker.adopted["shape"] = "ray-worker"
    _, text = commands.adopt_report({"b": worker})
    assert says(text, "ray-worker shape: a Ray node that runs no vLLM of its own") and not says(text, "vLLM runs as its main process")


def test_adopt_report_of_a_serve_without_switches_says_so():
    _, text = commands.adopt_report({"a": adopted_release([])})
    assert says(text, "with no switches")
    _, text = commands.adopt_report({"a": adopted_release([], switches={"S": "3"})})
    assert not says(text, "no switches")


def test_adopt_report_lists_three_changed_files_whole_and_no_rm_remark_for_a_kept_container():
    changed = [f"{SOURCE_ROOT}/vllm/{name}.py" for name in ("a", "b", "c")]
    _, text = commands.adopt_report({"a": adopted_release(changed)})
    line = next(line for line in text.splitlines() if "writable layer" in line)
    assert "…" not in line and line.endswith("the baked chain must include them")


# -- rollback and verify-running -----------------------------------------------------------------------------------

def test_rollback_answers_its_journal_and_the_release_it_went_back_to(world, options, capsys):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    code, answer, err = run(capsys, "rollback", "--json", *options)
    assert code == 0, err
    assert set(answer) == {"journal", "release"} and answer["release"] == CONTROL.id
    assert answer["journal"].startswith("rollback-")


def baseline_of(release: str | None, data: bytes) -> tuple:
    from kvbake.bake.core.served_overlay import ServedFile, ServedOverlay
    from kvbake.digests import sha256_hex

    return ServedOverlay(SOURCE_ROOT, "sha256:i", (ServedFile("vllm/a.py", sha256_hex(data), None, "x"),), release), {"vllm/a.py": data}


def test_rollback_puts_back_the_proof_baseline_of_the_release_it_returns_to_and_to_adopted_the_serve_before(
        world, capsys, tmp_path, monkeypatch):
    import shutil

    from kvbake.bake.adapters.served_proof import baseline_folder, read_served, write_record_folder, write_served
    from fake_fleet import STANDIN

    project = tmp_path / "standin"
    shutil.copytree(STANDIN.parent, project, ignore=shutil.ignore_patterns(".kvbake"))
    options = world.command_line(monkeypatch, manifest=project / STANDIN.name)
    adopted_then_deployed(world, options, capsys)
    deploy(world, PACKING)
    write_record_folder(baseline_folder(project, "adopted"), *baseline_of(None, b"before kvbake\n"), ["a", "b"])
    write_record_folder(baseline_folder(project, CONTROL.id), *baseline_of(CONTROL.id, b"control\n"), ["a", "b"])
    write_served(project, *baseline_of(PACKING.id, b"control\n"), ["a", "b"])
    code, answer, err = run(capsys, "rollback", "--json", *options)
    assert code == 0, err
    assert answer["proof_baseline"] == f"release {CONTROL.id}" and read_served(project)[0].release == CONTROL.id
    code, answer, err = run(capsys, "rollback", "--to", "adopted", "--json", *options)
    assert code == 0 and answer["proof_baseline"].startswith("the serve before kvbake"), err
    assert read_served(project)[1] == {"vllm/a.py": b"before kvbake\n"}


def test_rollback_with_break_lock_breaks_a_stale_lock(world, options, capsys):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    stale_locks(world, world.fleet.tag("current"))
    code, answer, err = run(capsys, "rollback", "--break-lock", "--json", *options)
    assert code == 0, err
    assert answer["release"] == CONTROL.id and settled(world)


def test_rollback_to_adopted_with_break_lock_breaks_a_stale_lock(world, options, capsys):
    adopted_then_deployed(world, options, capsys)
    stale_locks(world, world.fleet.tag("current"))
    code, answer, err = run(capsys, "rollback", "--to", "adopted", "--break-lock", "--json", *options)
    assert code == 0, err
    assert NodeState("a", world.engines["a"]).read().current.preset == "adopted" and settled(world)


# -- signing keys --------------------------------------------------------------------------------------------------

def key_file(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_a_public_key_after_blank_lines_and_with_stray_bytes_is_listed(tmp_path):
    path = key_file(tmp_path, "alice.pub", b"\n  \n" + PUBLIC.encode() + b"# \xff\xfe\n")
    assert commands.signing_key_entry(path, tmp_path / "project") == "../alice.pub"


@pytest.mark.parametrize(("name", "content"), [("alice.pub", b"not a key\n"), ("alice.key", PUBLIC.encode())])
def test_a_key_needs_both_the_public_header_and_the_pub_suffix(tmp_path, name, content):
    with pytest.raises(UsageError) as caught:
        commands.signing_key_entry(key_file(tmp_path, name, content), tmp_path)
    assert says(caught.value.fix, ".pub")


def test_an_unreadable_key_names_what_to_give(tmp_path):
    with pytest.raises(UsageError) as caught:
        commands.signing_key_entry(tmp_path / "absent.pub", tmp_path)
    assert says(caught.value.fix, "cosign.pub")


# -- init ----------------------------------------------------------------------------------------------------------

def init_refusal(tmp_path: Path, *given: str) -> UsageError:
    args = cli.parse_args(["init", *given, "--out", str(tmp_path / "project")], "build.py")
    with pytest.raises(UsageError) as caught:
        commands.cmd_init(args)
    return caught.value


@pytest.mark.parametrize(("given", "option", "fixed"), [
    (["--node", "a"], "--node", "--node"),
    (["--node", "a=h", "--container", "b=xx", "--container", "b=yy"], "--container", "--container"),
    (["--node", "a=h", "--container", "b=xx"], "--container", "--node"),
    (["--node", "a=h", "--donor-revision", "abc"], "--donor-revision", "commit"),
    (["--node", "a=h", "--launcher", " "], "--launcher", "--launcher"),
])
def test_a_malformed_init_option_is_named_with_its_fix(tmp_path, given, option, fixed):
    refusal = init_refusal(tmp_path, *given)
    assert says(refusal.message, option) and says(refusal.fix, fixed)


def test_init_checks_each_signing_key_before_it_reads_any_node(tmp_path):
    key = key_file(tmp_path, "alice.pub", PUBLIC.encode())
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "manifest.yaml").write_text("kept")
    refusal = init_refusal(tmp_path, "--node", "a=unix:///nonexistent/docker.sock", "--signing-key", str(key))
    assert says(refusal.fix, "--force") and (tmp_path / "project" / "manifest.yaml").read_text() == "kept"


def test_init_lists_the_signing_keys_and_leaves_the_templates_donor_url(nodes, tmp_path):
    key = key_file(tmp_path, "alice.pub", PUBLIC.encode())
    pair(nodes)
    data, _ = run_init(tmp_path / "project", "--signing-key", str(key))
    assert written(tmp_path / "project", "deploy.yaml")["signing"]["keys"] == ["../alice.pub"]
    assert "deploy.yaml signing.keys" not in data["placeholders"]
    assert written(tmp_path / "project", "manifest.yaml")["donor"]["url"].startswith("https://")


# -- deploy --dry-run ----------------------------------------------------------------------------------------------

def dry_run_refusal(*given: str) -> UsageError:
    args = cli.parse_args(["deploy", "--dry-run", *given], "build.py")
    with pytest.raises(UsageError) as caught:
        commands.deploy_dry_run(args)
    return caught.value


@pytest.mark.parametrize("given", [["--resume"], ["--revert"], ["--reseat", "a"], ["--break-lock"]])
def test_a_dry_run_names_the_option_it_does_not_take(given):
    refusal = dry_run_refusal("--preset", "control", *given)
    assert says(refusal.message, given[0]) and says(refusal.fix, "build.py deploy --help")


def test_a_dry_run_names_every_option_it_does_not_take_and_what_it_needs_without_a_preset():
    assert says(dry_run_refusal("--resume", "--break-lock").message, "--resume, --break-lock")
    assert says(dry_run_refusal().message, "no --resume or --revert")


def test_status_and_verify_running_still_read_a_diverged_deployment(world, options, capsys):
    deploy(world, CONTROL)
    diverged_deploy(world, PACKING)
    code, _, err = run(capsys, "status", "--json", *options)
    assert code == 0, err
    code, _, _ = run(capsys, "verify-running", "--json", *options)
    assert code != DivergedError.exit_code
