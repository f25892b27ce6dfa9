"""A container whose main process is `ray start --block` is a Ray node run by that very process, not by docker exec;
no process at all is no Ray node."""

from __future__ import annotations

from kvbake.serve.core.serve_reading import ray_node, runs_ray_node
from test_process_checks import proc


def test_a_main_ray_start_is_the_nodes_own_process_and_not_execd():
    main = proc(1, 0, ("ray", "start", "--block", "--head"), {"RAY_X": "1"})
    node = ray_node(main, [main])
    assert node is not None
    assert (node.argv, dict(node.env), node.process, node.execd) == (main.argv, {"RAY_X": "1"}, main, False)


def test_no_process_runs_no_ray_node():
    assert runs_ray_node(None) is False
