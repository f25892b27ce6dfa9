"""What the ship commands print without --json, over fake nodes: deploy names the release, preset, length and nodes;
verify-running each rank's switch set; rollback the release it went back to; adopt each node's adopted serve, its
shape and changed files; a --reseat of an unknown node is refused before anything moves."""

from __future__ import annotations

import pytest

from kvbake import cli
from kvbake.errors import UsageError

from fake_fleet import CONTAINER, SOURCE_ROOT, SWITCH, start_serves
from test_ship_records import PINNED, offered, project  # noqa: F401  (the stand-in project over two fake nodes)


def text_of(capsys, *argv: str) -> list[str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out.splitlines()


def test_deploy_verify_running_and_rollback_say_what_runs(project, capsys):
    control = offered(project, PINNED)
    [line] = text_of(capsys, "deploy", "--preset", "control", *project.argv)
    assert line.startswith(f"deployed release {control.id} (control, max-model-len {control.max_model_len}) to a, b")
    assert line.endswith("verify-running passed on every rank")
    assert text_of(capsys, "verify-running", *project.argv) == ["a: ok, switches (none)", "b: ok, switches (none)", "all ranks agree"]
    for engine in project.world.engines.values():
        engine.run_serving(CONTAINER, project.world.fleet.tag("current"), [f"{SWITCH}=3"], ("--max-model-len", str(control.max_model_len)))
    lines = text_of(capsys, "verify-running", "--expect", f"{SWITCH}=3", *project.argv)
    assert lines == [f"a: ok, switches {SWITCH}=3", f"b: ok, switches {SWITCH}=3", "all ranks agree"]


def test_rollback_names_the_release_it_went_back_to(project, capsys):
    from fake_fleet import CONTROL, PACKING, deploy

    deploy(project.world, CONTROL)
    deploy(project.world, PACKING)
    [line] = text_of(capsys, "rollback", *project.argv)
    assert line.startswith(f"rolled back every rank to release {CONTROL.id}") and "nothing pulled" in line


def test_adopt_names_each_nodes_serve_shape_and_changed_files(project, capsys):
    world = project.world
    ids = start_serves(world, shape="exec", auto_remove=True)
    changed = [f"{SOURCE_ROOT}/vllm/{name}.py" for name in ("a", "b", "c", "d")]
    world.engines["a"].containers[CONTAINER]["Changes"] = {path: "C" for path in changed}
    lines = text_of(capsys, "adopt", *project.argv)
    adopted_a = next(line for line in lines if line.startswith("a: adopted "))
    assert f"({ids['a'][:12]}, " in adopted_a and "vLLM started by docker exec" in adopted_a
    assert f"{SWITCH}" in adopted_a and "max-model-len 4096" in adopted_a
    changes = next(line for line in lines if line.startswith("a: its writable layer changes"))
    assert "changes 4 file(s)" in changes and f"({', '.join(changed[:3])}, …)" in changes
    assert changes.endswith("; a --rm serve comes back without them")
    assert not any(line.startswith("b: its writable layer") for line in lines)
    assert lines[-1].startswith("the first deploy keeps it as previous")


def test_adopt_of_a_main_process_serve_with_few_changes(project, capsys):
    world = project.world
    start_serves(world)
    world.engines["b"].containers[CONTAINER]["Changes"] = {f"{SOURCE_ROOT}/vllm/x.py": "C"}
    lines = text_of(capsys, "adopt", *project.argv)
    assert "vLLM runs as its main process" in next(line for line in lines if line.startswith("b: adopted "))
    changes = next(line for line in lines if line.startswith("b: its writable layer changes"))
    assert f"({SOURCE_ROOT}/vllm/x.py)" in changes and "…" not in changes and "--rm" not in changes


def test_a_reseat_of_a_node_the_deployment_lacks_is_refused(project, capsys):
    offered(project, PINNED)
    before = project.world.snapshot()
    code = cli.main(["deploy", "--preset", "control", "--reseat", "zz", "--reseat", "a", *project.argv])
    err = capsys.readouterr().err
    assert code == UsageError.exit_code and "--reseat zz: no such node" in err and "deploy --help" in err
    assert project.world.snapshot() == before


@pytest.mark.parametrize("argv", [["deploy"], ["deploy", "--dry-run"]])
def test_deploy_without_a_preset_is_a_usage_error(project, capsys, argv):
    code = cli.main([*argv, *project.argv])
    assert code == UsageError.exit_code and "--preset NAME" in capsys.readouterr().err


def test_a_deploy_from_a_project_with_a_proof_makes_its_release_the_baseline(project, capsys):
    """Later locks are held against the release that replaced today's serve, not against what ran before kvbake."""
    from kvbake.bake.adapters.served_proof import BEFORE_KVBAKE, baseline_folder, read_record, read_served, stage_chain, write_served
    from kvbake.bake.core.served_overlay import ServedFile, ServedOverlay
    from kvbake.digests import sha256_hex

    root = project.root
    before = ServedOverlay(SOURCE_ROOT, "sha256:i", (ServedFile("vllm/x.py", sha256_hex(b"mod\n"), None, "mounted from /x"),))
    write_served(root, before, {"vllm/x.py": b"mod\n"}, ["a", "b"])
    control = offered(project, PINNED)
    lines = text_of(capsys, "deploy", "--preset", "control", *project.argv)  # a lock made on another host: nothing staged here
    assert lines[-1] == "proof baseline: kept as it was: this lock was made on another host (run lock here to stage its files)"
    assert read_served(root)[0] == before
    assert stage_chain(root, SOURCE_ROOT, "sha256:d", project.lock.overlay_tree_sha256, {"vllm/x.py": b"baked\n"}, {"vllm/x.py": None})
    lines = text_of(capsys, "deploy", "--preset", "control", *project.argv)
    assert lines[-1] == f"proof baseline: release {control.id} (a later lock is held against the files it serves)"
    baseline, data = read_served(root)
    assert baseline.release == control.id and data == {"vllm/x.py": b"baked\n"}
    assert read_record(baseline_folder(root, BEFORE_KVBAKE))[1] == {"vllm/x.py": b"mod\n"}, "the serve before kvbake is kept"
