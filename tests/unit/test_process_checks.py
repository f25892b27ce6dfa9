"""The pure reading of a serving container's processes and the checks of what each vLLM serve runs with."""

from __future__ import annotations

import pytest

from kvbake.engines.core.procfs import ImportOrigin, Process, parse_origins, parse_processes
from kvbake.ship.core.process_checks import (ProcessExpectation, change_failures, changed_files, changes_since_adopt, edits_since_adopt, process_failures, process_signature,
                                             ray_worker_failures)
from kvbake.serve.core.serve_reading import EXEC, MAIN, exec_command, first_path_entry, ray_exec_command, ray_start_of_raylet, read_serve

ROOT = "/usr/local/lib/python3.11/dist-packages"
BAKED = ROOT + "/vllm/__init__.py"
NAMES = ("VLLM_A", "VLLM_B", "VLLM_FORBIDDEN")
SERVE = ("python3", "/usr/local/bin/vllm", "serve", "/models/m", "--max-model-len", "4096", "--gpu-memory-utilization", "0.9")


def proc(pid: int, ppid: int, argv: tuple[str, ...], env: dict[str, str] | None = None, cwd: str = "/", uid: int = 0) -> Process:
    return Process(pid, ppid, argv, env or {}, cwd, "/usr/bin/python3", uid)


def expectation(switches=None, max_model_len=4096, args=("--gpu-memory-utilization", "0.9"), image_env=(), baked=True) -> ProcessExpectation:
    return ProcessExpectation(switches or {}, NAMES, tuple(image_env), max_model_len, args, ROOT, baked)


# ---- reading ----

def test_the_main_shape_and_the_exec_shape_are_told_apart_and_forked_children_are_not_serves():
    main = read_serve([proc(1, 0, SERVE), proc(9, 1, SERVE), proc(10, 9, ("VLLM::EngineCore",))])
    assert main.shape == MAIN and [s.process.pid for s in main.serving] == [1]
    execd = read_serve([proc(1, 0, ("sleep", "infinity")), proc(20, 0, ("bash", "-c", "eval x && vllm serve /m")), proc(21, 20, SERVE)])
    assert execd.shape == EXEC and [(s.process.pid, s.root.pid) for s in execd.serving] == [(21, 20)]
    assert execd.main.argv == ("sleep", "infinity")
    assert read_serve([proc(1, 0, ("ray", "start", "--block"))]).serving == ()


def test_the_exec_command_carries_what_the_serve_saw_beyond_the_containers_environment():
    reading = read_serve([proc(1, 0, ("sleep", "infinity"), {"PATH": "/bin"}),
                          proc(5, 0, ("bash", "-c", "vllm serve /m"), {"PATH": "/bin", "X": "1"}, "/work", 1000),
                          proc(6, 5, SERVE, {"PATH": "/bin", "X": "1", "VLLM_A": "1"}, "/work", 1000)])
    assert exec_command(reading.serving[0], ["PATH=/bin"]) == {"argv": ["bash", "-c", "vllm serve /m"], "env": {"X": "1", "VLLM_A": "1"},
                                                               "cwd": "/work", "user": "1000"}


@pytest.mark.parametrize(("argv", "env", "first"), [
    (SERVE, {}, "/usr/local/bin"),
    (("python3", "-m", "vllm.entrypoints.cli.main", "serve", "/m"), {}, "/srv"),
    (("python3", "-I", "-m", "vllm.entrypoints.cli.main", "serve", "/m"), {}, "-"),
    (("python3", "-uP", "-m", "vllm.entrypoints.cli.main", "serve", "/m"), {}, "-"),
    (("python3", "-m", "vllm.entrypoints.cli.main", "serve", "/m"), {"PYTHONSAFEPATH": "1"}, "-"),
    (("/usr/local/bin/vllm", "serve", "/m"), {}, "/usr/local/bin"),
    (("python3", "bin/vllm", "serve", "/m"), {}, "/srv/bin"),
])
def test_the_first_sys_path_entry_follows_the_command_line(argv, env, first):
    assert first_path_entry(proc(1, 0, argv, env, cwd="/srv")) == first


def test_the_probes_answers_are_read_as_literals_never_as_code():
    text = repr([{"pid": 7, "ppid": 0, "uid": 1000, "argv": ["a"], "env": ["A=1", "A=2", "B"], "cwd": "/", "exe": "/bin/a"}])
    assert parse_processes(text) == (Process(7, 0, ("a",), {"A": "2"}, "/", "/bin/a", 1000),)
    assert parse_origins(repr([{"origin": BAKED, "path": ["/x"]}, {"error": ["boom"]}]), 2) == (
        ImportOrigin(BAKED, ("/x",)), ImportOrigin(None, (), "boom"))
    for bad in ("__import__('os').system('true')", "[1, 2", repr({"pid": 1})):
        with pytest.raises(ValueError):
            parse_processes(bad)
    with pytest.raises(ValueError):
        parse_origins(repr([]), 1)


# ---- checks ----

def failures(processes, expected, origins=None):
    reading = read_serve(processes)
    return process_failures("n1", reading, origins or [ImportOrigin(BAKED, (ROOT,))] * len(reading.serving), expected)


def test_a_serve_that_runs_the_release_exactly_passes():
    assert failures([proc(1, 0, SERVE, {"VLLM_A": "1"})], expectation({"VLLM_A": "1"})) == []


@pytest.mark.parametrize(("env", "switches", "named"), [
    ({}, {"VLLM_A": "1"}, ["n1: pid 1: switch VLLM_A is unset, expected 1"]),
    ({"VLLM_A": "1"}, {}, ["n1: pid 1: switch VLLM_A is 1, expected unset"]),
    ({"VLLM_A": "2", "VLLM_FORBIDDEN": "1"}, {"VLLM_A": "1", "VLLM_B": "x"},
     ["n1: pid 1: switch VLLM_A is 2, expected 1", "n1: pid 1: switch VLLM_B is unset, expected x",
      "n1: pid 1: switch VLLM_FORBIDDEN is 1, expected unset"]),
    ({"UNRELATED": "1"}, {}, []),
])
def test_the_switch_set_is_read_from_the_process_environment_exactly(env, switches, named):
    assert failures([proc(1, 0, SERVE, env)], expectation(switches)) == named


def test_a_switch_passed_by_docker_exec_is_seen_on_the_rank_that_has_it():
    processes = [proc(1, 0, ("sleep", "infinity")), proc(30, 0, SERVE, {"VLLM_A": "1"})]
    assert failures(processes, expectation()) == ["n1: pid 30: switch VLLM_A is 1, expected unset"]


def test_code_selecting_variables_count_in_the_process_unless_the_image_sets_them_alike():
    assert failures([proc(1, 0, SERVE, {"PYTHONPATH": "/w"})], expectation()) == [
        "n1: pid 1: PYTHONPATH='/w' in its environment, not as the image sets it ('unset')"]
    assert failures([proc(1, 0, SERVE, {"PYTHONPATH": "/w"})], expectation(image_env=("PYTHONPATH=/w",))) == []
    assert failures([proc(1, 0, SERVE, {"PYTHONPATH": "/w"})], expectation(baked=False)) == [], "an adopted serve keeps its own"


@pytest.mark.parametrize(("argv", "named"), [
    ((*SERVE[:5], "8192", *SERVE[6:]), ["n1: pid 1: --max-model-len is 8192 in its command line, not 4096"]),
    (SERVE[:4] + SERVE[6:], ["n1: pid 1: --max-model-len is unset in its command line, not 4096"]),
    (SERVE[:6], ["n1: pid 1: the preset's --gpu-memory-utilization 0.9 is not in its command line"]),
    ((*SERVE[:7], "0.8"), ["n1: pid 1: the preset's --gpu-memory-utilization 0.9 is not in its command line"]),
])
def test_the_length_and_the_presets_arguments_are_read_from_the_command_line(argv, named):
    assert failures([proc(1, 0, argv)], expectation()) == named
    assert failures([proc(1, 0, argv)], expectation(max_model_len=0, args=())) == []


def test_a_working_directory_that_shadows_the_baked_vllm_is_named_with_the_entry():
    origin = ImportOrigin("/work/vllm/__init__.py", ("/work", ROOT))
    assert failures([proc(1, 0, ("python3", "-m", "vllm.entrypoints.cli.main", "serve", "/m", "--max-model-len", "4096",
                                 "--gpu-memory-utilization", "0.9"), cwd="/work")], expectation(), [origin]) == [
        f"n1: pid 1: imports vllm from /work/vllm/__init__.py, not the baked {BAKED} (sys.path entry /work; its working directory is /work)"]
    assert failures([proc(1, 0, SERVE)], expectation(), [ImportOrigin(None, (), "exit 1")]) == [
        "n1: pid 1: where it imports vllm from could not be read (exit 1)"]
    assert failures([proc(1, 0, SERVE)], expectation(baked=False), [ImportOrigin("/work/vllm/__init__.py", ("/work",))]) == []


@pytest.mark.parametrize("origin, shown", [("/opt/other/vllm/__init__.py", "/opt/other/vllm/__init__.py"), (None, "nowhere"),
                                           ("/srv/vllm/__init__.py", "/srv/vllm/__init__.py")])
def test_an_import_from_outside_every_sys_path_entry_or_from_nowhere_names_no_entry(origin, shown):
    found = ImportOrigin(origin, ("/work", "/srv/X"))
    assert failures([proc(1, 0, SERVE)], expectation(), [found]) == [f"n1: pid 1: imports vllm from {shown}, not the baked {BAKED}"]


def test_a_sys_path_entry_written_with_a_trailing_slash_is_named():
    found = ImportOrigin("/work/vllm/__init__.py", ("/work/",))
    assert failures([proc(1, 0, SERVE, cwd="/work")], expectation(), [found]) == [
        f"n1: pid 1: imports vllm from /work/vllm/__init__.py, not the baked {BAKED} (sys.path entry /work/; its working directory is /work)"]


def test_no_serve_at_all_is_one_failure_naming_the_main_process():
    assert failures([proc(1, 0, ("sleep", "infinity"))], expectation()) == [
        "n1: no vLLM serve runs in the serving container (its main process is sleep infinity)"]


def test_file_changes_under_the_source_root_are_named_and_bytecode_python_wrote_is_not():
    changes = {"/usr": "C", "/usr/local": "C", "/usr/local/lib": "C", "/usr/local/lib/python3.11": "C", ROOT: "C", ROOT + "/vllm": "C",
               ROOT + "/vllm/envs.py": "C", ROOT + "/vllm/__pycache__": "A", ROOT + "/vllm/__pycache__/utils.cpython-311.pyc": "A",
               ROOT + "/vllm/__pycache__/envs.cpython-311.pyc": "A", ROOT + "/vllm/extra.py": "A", ROOT + "/vllm/gone.py": "D",
               "/tmp/x": "A", "/root/.cache/vllm/a": "A"}
    assert changed_files(changes, ROOT) == [(ROOT + "/vllm/__pycache__/envs.cpython-311.pyc", "A"), (ROOT + "/vllm/envs.py", "C"),
                                            (ROOT + "/vllm/extra.py", "A"), (ROOT + "/vllm/gone.py", "D")]
    assert change_failures("n1", {ROOT + "/vllm/x.py": "C"}, ROOT) == [f"n1: {ROOT}/vllm/x.py was changed in the running container"]


def test_the_signature_ignores_what_differs_per_rank_and_how_the_model_is_named():
    head = read_serve([proc(1, 0, ("python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--max-model-len", "4096",
                                   "--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1"), {"VLLM_A": "1"})])
    worker = read_serve([proc(1, 0, ("python3", "-m", "vllm.entrypoints.cli.main", "serve", "/m", "--max-model-len", "4096",
                                     "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--headless"), {"VLLM_A": "1"})])
    assert process_signature(head, NAMES) == process_signature(worker, NAMES)
    other = read_serve([proc(1, 0, ("python3", "-m", "vllm.entrypoints.cli.main", "serve", "/m", "--max-model-len", "8192"), {"VLLM_A": "1"})])
    assert process_signature(other, NAMES) != process_signature(worker, NAMES)


def test_a_ray_worker_rank_is_its_ray_node_holding_the_releases_switch_set():
    ray_node = read_serve([proc(1, 0, ("ray", "start", "--block", "--address=10.0.0.11:6379"), {"VLLM_A": "1", "PATH": "/bin"})])
    assert ray_worker_failures("b", ray_node) == [], "an adopted Ray worker is held to its Ray node alone"
    assert ray_worker_failures("b", ray_node, {"VLLM_A": "1"}, NAMES) == []
    assert ray_worker_failures("b", ray_node, {"VLLM_A": "1", "VLLM_B": "2"}, NAMES) == [
        "b: the Ray node runs VLLM_B=(unset), the release sets 2"]
    assert ray_worker_failures("b", ray_node, {}, NAMES) == ["b: the Ray node runs VLLM_A=1, the release sets (unset)"]
    waiting = read_serve([proc(1, 0, ("sleep", "infinity"))])
    assert ray_worker_failures("b", waiting, {}, NAMES) == [
        "b: the Ray worker rank runs no Ray node (its main process is sleep infinity, and no raylet runs beside it)"]


RAYLET_ARGV = ("/usr/local/lib/python3.11/dist-packages/ray/core/src/ray/raylet/raylet", "--object_manager_port=0",
               "--node_ip_address=127.0.0.3", "--static_resource_list=node:127.0.0.3,1.0,CPU,1,GPU,1.0,memory,2503225344",
               "--object_store_memory=78643200", "--gcs-address=127.0.0.2:6390", "--node-name=127.0.0.3")


def test_a_ray_node_docker_exec_started_beside_sleep_infinity_is_read_from_its_raylet():
    """Current eugr: `ray start` (no --block) run by docker exec exits once Ray's daemons run; the raylet shows the node,
    and the `ray start` it was started with is rebuilt from its own arguments."""
    raylet_env = {"VLLM_A": "1", "RAY_OVERRIDE_NODE_IP_ADDRESS": "127.0.0.3"}
    reading = read_serve([proc(1, 0, ("sleep", "infinity")), proc(40, 0, RAYLET_ARGV, raylet_env)])
    assert reading.ray is not None and reading.ray.execd and reading.ray.env == raylet_env
    assert reading.ray.argv == ("ray", "start", "--address=127.0.0.2:6390", "--node-ip-address=127.0.0.3", "--num-cpus=1",
                                "--num-gpus=1", "--object-store-memory=78643200")
    assert ray_worker_failures("b", reading, {"VLLM_A": "1"}, NAMES) == []
    head = ray_start_of_raylet((*RAYLET_ARGV[:-2], "--gcs-address=127.0.0.2:6390", "--head"))
    assert head[:4] == ("ray", "start", "--head", "--port=6390")
    block = read_serve([proc(1, 0, ("ray", "start", "--block", "--head")), proc(9, 1, RAYLET_ARGV)])
    assert block.ray.argv == ("ray", "start", "--block", "--head") and not block.ray.execd, "the main process wins"
    assert read_serve([proc(1, 0, ("sleep", "infinity"))]).ray is None


def test_the_ray_exec_of_an_adopted_node_keeps_what_the_container_does_not_set_and_withholds_secrets():
    reading = read_serve([proc(1, 0, ("sleep", "infinity")), proc(40, 0, RAYLET_ARGV, {"PATH": "/bin", "HF_TOKEN": "hf_x" * 9,
                                                                                       "RAY_OVERRIDE_NODE_IP_ADDRESS": "127.0.0.3"})])
    command = ray_exec_command(reading.ray, ("PATH=/bin",))
    assert command["argv"][:3] == ["ray", "start", "--address=127.0.0.2:6390"]
    assert command["env"] == {"RAY_OVERRIDE_NODE_IP_ADDRESS": "127.0.0.3"} and command["secret_env"] == ["HF_TOKEN"]
    assert ray_exec_command(read_serve([proc(1, 0, ("ray", "start", "--block"))]).ray, ()) is None, "the container starts it"
    assert ray_exec_command(None, ()) is None


def test_the_adopted_serve_may_keep_the_changes_adopt_recorded_and_no_other():
    root = "/usr/local/lib/python3.11/dist-packages"
    recorded = [f"{root}/vllm/mod.py"]
    changes = {f"{root}/vllm": "C", f"{root}/vllm/mod.py": "C", f"{root}/vllm/__pycache__": "A", f"{root}/vllm/__pycache__/mod.cpython-311.pyc": "A"}
    assert changes_since_adopt("b", changes, root, recorded) == []
    later = {**changes, f"{root}/vllm/other.py": "C", f"{root}/vllm/gone.py": "D", "/etc/hosts": "C"}
    failures = changes_since_adopt("b", later, root, recorded)
    assert [f.split(" was ")[0] for f in failures] == [f"b: {root}/vllm/gone.py", f"b: {root}/vllm/other.py"]
    assert all("after adopt (adopt recorded 1 changed file(s) there)" in f for f in failures)
    assert "deleted" in failures[0] and "changed" in failures[1]


def test_a_file_adopt_found_changed_is_held_to_its_recorded_content():
    recorded = {f"{ROOT}/vllm/mod.py": "a" * 64, f"{ROOT}/vllm/new.py": "b" * 64}
    assert edits_since_adopt("b", recorded, dict(recorded)) == []
    failures = edits_since_adopt("b", recorded, {f"{ROOT}/vllm/mod.py": "c" * 64})
    assert failures == [f"b: {ROOT}/vllm/mod.py was edited in the adopted serve's container after adopt (sha256 cccccccccccc, "
                        "adopt recorded sha256 aaaaaaaaaaaa)",
                        f"b: {ROOT}/vllm/new.py was deleted in the adopted serve's container after adopt (adopt recorded sha256 bbbbbbbbbbbb)"]
