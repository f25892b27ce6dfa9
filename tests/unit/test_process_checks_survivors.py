"""Two vLLM serves in one container fail the rank's process check, and a change kind kvbake does not name is shown as
the engine reported it."""

from __future__ import annotations

from kvbake.serve.core.serve_reading import read_serve
from kvbake.ship.core.process_checks import change_failures, changes_since_adopt, process_failures
from test_process_checks import ROOT, SERVE, expectation, proc

OTHER = ("python3", "/usr/local/bin/vllm", "serve", "/models/other", "--max-model-len", "4096", "--gpu-memory-utilization", "0.9")


def test_two_serves_in_one_container_are_a_failure_naming_both():
    reading = read_serve([proc(1, 0, ("sleep", "infinity")), proc(5, 0, SERVE), proc(6, 0, OTHER)])
    failures = process_failures("a", reading, [], expectation())
    assert ("a: 2 vLLM serves run in one container: pid 5 (/models/m), pid 6 (/models/other); a GPU node serves one model"
            in failures)


def test_a_change_kind_without_a_name_is_shown_as_reported():
    path = ROOT + "/vllm/x.py"
    assert changes_since_adopt("b", {path: "R"}, ROOT, []) == [
        f"b: {path} was R in the adopted serve's container after adopt (adopt recorded 0 changed file(s) there)"]
    assert change_failures("b", {path: "R"}, ROOT) == [f"b: {path} was R in the running container"]
