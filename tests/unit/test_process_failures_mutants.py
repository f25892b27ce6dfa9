"""What the process check names when a rank runs no serve (its main process, at most 80 characters of it, or nothing)
and when a serve overrides a code-selecting variable (the image's own value, read up to the first `=`)."""

from __future__ import annotations

from kvbake.engines.core.procfs import ImportOrigin, Process
from kvbake.ship.core.process_checks import ProcessExpectation, process_failures
from kvbake.serve.core.serve_reading import ServeReading, read_serve

ROOT = "/usr/local/lib/python3.11/dist-packages"
BAKED = ImportOrigin(ROOT + "/vllm/__init__.py", (ROOT,))
SERVE = ("python3", "/usr/local/bin/vllm", "serve", "/models/m", "--max-model-len", "4096")


def expectation(image_env: tuple[str, ...] = ()) -> ProcessExpectation:
    return ProcessExpectation({}, ("VLLM_A",), image_env, 4096, (), ROOT)


def failures_of(env: dict[str, str], image_env: tuple[str, ...]) -> list[str]:
    reading = read_serve([Process(1, 0, SERVE, env, "/", "/usr/bin/python3")])
    return process_failures("a", reading, [BAKED], expectation(image_env))


def test_a_container_with_no_main_process_is_said_to_run_nothing():
    failures = process_failures("a", ServeReading((), None), [], expectation())
    assert len(failures) == 1 and failures[0].endswith("(its main process is nothing)")


def test_a_long_main_process_is_named_by_its_first_80_characters():
    main = Process(1, 0, ("sleep", "x" * 200), {}, "/", "/bin/sleep")
    failures = process_failures("a", ServeReading((), main), [], expectation())
    named = failures[0].split("(its main process is ", 1)[1].rstrip(")")
    assert named == ("sleep " + "x" * 200)[:80]


def test_an_image_value_holding_an_equals_sign_is_the_images_own():
    assert failures_of({"PYTHONPATH": "/opt/a=b"}, ("PYTHONPATH=/opt/a=b",)) == []


def test_an_override_is_reported_beside_the_images_own_value():
    failures = failures_of({"PYTHONPATH": "/opt/shadow"}, ("PYTHONPATH=/opt/app",))
    assert len(failures) == 1 and "'/opt/shadow'" in failures[0] and "('/opt/app')" in failures[0]
