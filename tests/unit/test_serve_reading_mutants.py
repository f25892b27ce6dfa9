"""Which main process is a Ray node, where a serve's root is, and what a `docker exec` restart adds to its environment
and whose working directory and user it keeps."""

from __future__ import annotations

import pytest

from kvbake.serve.core.serve_reading import MAIN, exec_command, read_serve, runs_ray_node
from test_process_checks import SERVE, proc


@pytest.mark.parametrize(("argv", "ray_node"), [
    (("ray", "start", "--block"), True),
    (("python3", "-u", "/usr/local/bin/ray", "start"), True),
    (("env", "A=1", "B=2", "ray", "start"), False),
    (("ray", "status", "start"), False),
    (("ray",), False),
])
def test_a_ray_node_names_ray_in_its_first_three_tokens_and_start_right_after(argv, ray_node):
    assert runs_ray_node(proc(1, 0, argv)) is ray_node


def test_a_variable_whose_value_holds_an_equals_sign_is_the_containers_own_when_alike():
    env = {"OPTS": "a=b", "X": "k=1"}
    reading = read_serve([proc(1, 0, SERVE, env)])
    assert exec_command(reading.serving[0], ["OPTS=a=b", "X=k=2"])["env"] == {"X": "k=1"}


def test_a_serve_under_a_child_of_pid_1_is_the_containers_own():
    reading = read_serve([proc(1, 0, ("tini", "--", "bash")), proc(2, 1, ("bash", "-c", "vllm serve /m")), proc(3, 2, SERVE)])
    assert reading.shape == MAIN and reading.serving[0].root.pid == 1


def test_a_parent_cycle_ends_at_the_first_process_seen_again():
    reading = read_serve([proc(5, 6, SERVE), proc(6, 5, ("bash", "-c", "vllm serve /m"))])
    assert [(s.process.pid, s.root.pid) for s in reading.serving] == [(5, 5)]


@pytest.mark.parametrize(("root", "started_again"), [
    (("/bin/bash",), "serve"),  # `docker exec -it NODE /bin/bash`, then vllm serve typed into it (run_cluster.sh's usage)
    (("bash", "-l"), "serve"),
    (("sh", "-i"), "serve"),
    (("bash", "-i", "-c", "vllm serve /m"), "root"),  # eugr's exec: the command is on the shell's own command line
    (("bash", "-lc", "vllm serve /m"), "root"),
    (("bash", "start.sh"), "root"),
])
def test_a_shell_that_read_the_serve_command_from_its_terminal_gives_way_to_the_serves_own_command_line(root, started_again):
    """Run again, such a shell would read no input and start nothing: the serve's own argv, cwd and user are started."""
    reading = read_serve([proc(1, 0, ("sleep", "infinity")), proc(40, 0, root), proc(41, 40, SERVE)])
    command = exec_command(next(s for s in reading.serving if s.process.pid == 41), [])
    assert command["argv"] == list(SERVE if started_again == "serve" else root)


def test_an_execd_serve_is_started_again_in_the_working_directory_and_as_the_user_of_the_process_docker_exec_started():
    """`docker exec -u 0 -w /opt/app NODE bash -c 'cd /models && exec setpriv --reuid 1000 vllm serve …'`: the serve runs
    elsewhere and as another user, and only the exec's own cwd and user start that command line as it ran."""
    root = ("bash", "-c", "cd /models && exec setpriv --reuid 1000 vllm serve /m")
    reading = read_serve([proc(1, 0, ("sleep", "infinity")), proc(30, 0, root, cwd="/opt/app", uid=0),
                          proc(31, 30, SERVE, cwd="/models", uid=1000)])
    command = exec_command(reading.serving[0], [])
    assert (command["argv"], command["cwd"], command["user"]) == (list(root), "/opt/app", "0")
