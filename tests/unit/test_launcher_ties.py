"""A serve still tied to the launcher that started it: a container `docker run` created in the foreground (vLLM's
run_cluster.sh), a vLLM whose output goes to an attached `docker exec` (eugr's launch-cluster.sh exec, a second
terminal); each named, and adopt refuses it until the operator says the launcher is retired. procfs tells an interactive
exec by vLLM's standard input (a pipe for -i, a terminal for -t); a detached or plain exec gives it /dev/null."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.engines.core.procfs import Process
from kvbake.errors import RolloutError
from kvbake.serve.core.launcher_ties import interactive_shell, launcher_ties, trap_ties
from kvbake.serve.core.serve_reading import read_serve
from kvbake.ship.adapters.adoption import adopt

from fake_fleet import CONTAINER, World, make_world, start_serves
from message_words import says

LOG = "pipe:[1001]"  # the container's log: its main process's output
VLLM = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m", "--max-model-len", "4096")


def process(pid: int, ppid: int, argv: tuple[str, ...], stdout: str, stdin: str = "/dev/null") -> Process:
    return Process(pid, ppid, argv, {}, "/", "/usr/bin/python3", 0, stdout, stdin)


def container(attached: bool = False, name: str = "node-23127") -> dict:
    return {"Name": f"/{name}", "Config": {"AttachStdout": attached, "AttachStderr": attached}}


def ties(processes: list[Process], attached: bool = False, name: str = "serve") -> list[str]:
    return launcher_ties("spark-a", container(attached, name), read_serve(processes))


def test_a_container_started_in_the_foreground_is_named_with_run_cluster_shs_trap():
    (tie,) = ties([process(1, 0, ("ray", "start", "--block", "--head"), LOG)], attached=True, name="node-23127")
    assert says(tie, "spark-a: node-23127 was started by `docker run` in the foreground") and says(tie, "EXIT trap removes it by name")


@pytest.mark.parametrize(("root", "how", "stdin", "stdout"), [
    (("bash", "-i", "-c", "vllm serve /models/m"), "an interactive shell of `docker exec` (eugr's launch-cluster.sh exec",
     "pipe:[2001]", "pipe:[2002]"),
    (VLLM, "the interactive `docker exec` that started it", "pipe:[2001]", "pipe:[2002]"),
    (VLLM, "the interactive `docker exec` that started it", "/dev/pts/0", "/dev/pts/0"),  # docker exec -it NODE bash
])
def test_a_vllm_reading_from_an_interactive_docker_exec_is_named(root, how, stdin, stdout):
    processes = [process(1, 0, ("sleep", "infinity"), LOG)]
    if root == VLLM:
        processes.append(process(40, 0, VLLM, stdout, stdin))
    else:
        processes += [process(40, 0, root, stdout, stdin), process(41, 40, VLLM, stdout, stdin)]
    (tie,) = ties(processes)
    assert says(tie, f"its vLLM (pid {processes[-1].pid}) writes to {how}") and says(tie, "not to serve's log")


@pytest.mark.parametrize(("stdout", "stdin"), [(LOG, "/dev/null"), ("/dev/null", "/dev/null"), ("", ""), ("pipe:[2002]", "/dev/null"),
                                               (LOG, "pipe:[2001]")])
def test_a_vllm_that_reads_no_client_or_writes_to_the_containers_log_is_no_tie(stdout, stdin):
    """kvbake's own exec (its output on the main process's), `docker exec --detach` (its output in a pipe of the
    engine's, its input /dev/null) and a plain attached exec, which procfs cannot tell from a detached one."""
    assert ties([process(1, 0, ("sleep", "infinity"), LOG), process(40, 0, VLLM, stdout, stdin)]) == []


def test_vllm_as_the_main_process_of_a_detached_container_is_no_tie():
    assert ties([process(1, 0, VLLM, "pipe:[7]")]) == []


@pytest.mark.parametrize(("name", "launcher"), [("node-23127", "run_cluster.sh"), ("vllm_node", "launch-cluster.sh")])
def test_a_detached_container_named_as_a_launchers_exit_trap_stops_is_named_by_its_name(name, launcher):
    """eugr's `start -d` leaves vllm_node detached, with nothing in it to show a later run of the script: its name is
    the tie (a run of the script that ends stops it by that name)."""
    assert ties([process(1, 0, ("ray", "start", "--block", "--head"), LOG)], name=name) == [], "no tie that stops adopt"
    (tie,) = trap_ties("spark-a", container(name=name))
    assert says(tie, f"spark-a: {name} bears a name a launcher's exit trap stops") and launcher in tie
    assert trap_ties("spark-a", container(attached=True, name=name)) == [], "a foreground one is named once, as foreground"
    assert trap_ties("spark-a", container(name="vllm-serve")) == []


@pytest.mark.parametrize(("argv", "interactive"), [(("bash", "-i", "-c", "x"), True), (("/bin/sh", "-ic", "x"), True),
                                                    (("bash", "-c", "x"), False), (("bash", "--init-file", "x"), False), ((), False)])
def test_an_interactive_shell_is_told_by_its_options(argv, interactive):
    assert interactive_shell(argv) is interactive


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_adopt_refuses_a_serve_started_in_the_foreground_until_the_launcher_is_said_retired(world):
    start_serves(world)
    world.engines["a"].containers[CONTAINER]["Config"]["AttachStdout"] = True
    with pytest.raises(RolloutError) as refused:
        adopt(world.fleet, "run_cluster.sh's serve", False)
    assert says(refused.value.message, "still tied to its launcher") and says(refused.value.fix, "adopt --launcher-retired")
    assert says(refused.value.fix, "nothing was changed") and all("kvbake-state" not in e.containers for e in world.engines.values())
    releases = adopt(world.fleet, "run_cluster.sh's serve, its script retired", False, launcher_retired=True)
    assert set(releases) == {"a", "b"}


def test_a_launcher_kvbake_does_not_know_is_named_by_its_tie_and_adopt_changes_nothing(world):
    """A wrapper of the operator's own (neither run_cluster.sh nor eugr's script) that keeps `docker run` in the
    foreground: the tie is read from the container, not from the script's name, and adopt refuses with exit 12."""
    start_serves(world)
    serving = world.engines["b"].containers[CONTAINER]
    serving["Name"] = "/team-serve"
    serving["Config"]["AttachStderr"] = True
    before = {name: set(engine.containers) for name, engine in world.engines.items()}
    with pytest.raises(RolloutError) as refused:
        adopt(world.fleet, "the team's wrapper", False)
    assert refused.value.exit_code == 12 and says(refused.value.message, "team-serve") and says(refused.value.message, "foreground")
    assert says(refused.value.fix, "Retire your launcher") and says(refused.value.fix, "adopt --launcher-retired")
    assert {name: set(engine.containers) for name, engine in world.engines.items()} == before


def test_adopt_names_a_detached_container_bearing_a_trapped_name_and_goes_on(world, caplog):
    """eugr's vllm_node left by `start -d`: adopt says a run of the script would stop it, and adopts (nothing shows a
    run of the script from the node, so the operator's word is not asked again)."""
    start_serves(world)
    for engine in world.engines.values():
        engine.containers[CONTAINER]["Name"] = "/vllm_node"
    with caplog.at_level("WARNING"):
        releases = adopt(world.fleet, "eugr's start -d", False)
    assert set(releases) == {"a", "b"}
    named = [r.getMessage() for r in caplog.records if "bears a name a launcher's exit trap stops" in r.getMessage()]
    assert len(named) == 2 and all("vllm_node" in line and "launch-cluster.sh" in line for line in named)
