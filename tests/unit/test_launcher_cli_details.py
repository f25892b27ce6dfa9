"""The launcher adapter's details: env-file switch names, the engine's reason, a refused stop named as stopping."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from python_on_whales.exceptions import DockerException

from kvbake.launcher import cli as launcher
from kvbake.launcher.core import launch_plan as core

from message_words import says

from test_launcher import FakeClient, FakeContainers, env_for, run_of


def test_the_switch_names_are_the_names_before_the_first_equals_sign_of_uncommented_lines(tmp_path: Path) -> None:
    path = tmp_path / "ranks.env"
    path.write_text("# kvbake config: generated\nVLLM_A=x=y\n  # VLLM_COMMENTED=1\n   VLLM_B = 2\nno equals sign here\n#\n")
    step = dataclasses.replace(run_of(), env_file=str(path))
    assert launcher.switch_names_of(step) == ["VLLM_A", "VLLM_B"]


def test_the_engines_reason_is_its_last_telling_line_or_the_error_itself_or_no_output() -> None:
    refusal = DockerException(["docker", "run"], 125, b"", b"docker: Error response from daemon: conflict.\n\nSee 'docker run --help'.\n")
    assert launcher.engine_reason(refusal) == "docker: Error response from daemon: conflict."
    assert launcher.engine_reason(RuntimeError("first\nsecond  \n")) == "second"
    assert launcher.engine_reason(RuntimeError("")) == "no output"
    assert launcher.engine_reason(DockerException(["docker"], 1, b"", b"Run 'docker run --help' for more information\n")) == \
        "Run 'docker run --help' for more information", "a hint alone is all there is to show"


class RefusingStop(FakeContainers):
    def stop(self, name: str, time: int | None = None) -> None:
        raise DockerException(["docker", "stop"], 1, b"", b"Error response from daemon: cannot stop container: permission denied\n")


def test_a_refused_stop_is_one_line_that_says_stopping() -> None:
    client = FakeClient()
    client.container = RefusingStop({"vllm-serve"})
    try:
        launcher.carry_out(client, core.StopServe("vllm-serve"), "ssh://ops@spark-a")
    except launcher.EngineFailure as err:
        text = str(err)
    assert "stopping vllm-serve on ssh://ops@spark-a failed" in text and "permission denied" in text


def test_the_console_script_runs_with_the_programs_arguments_and_environment(monkeypatch, capsys, tmp_path: Path) -> None:
    (tmp_path / "ranks.env").write_text("VLLM_DSV41_KV_PAIR=3\n")
    for name, value in {**env_for(), "KVBAKE_ENV_FILE": str(tmp_path / "ranks.env")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(launcher.sys, "argv", ["kvbake-launch-vllm", "--print"])
    monkeypatch.setattr(launcher, "DockerClient", None)  # any engine call would fail
    with pytest.raises(SystemExit) as caught:
        launcher.main()
    assert caught.value.code == 0 and capsys.readouterr().out.startswith("docker run --detach --name vllm-serve ")
    monkeypatch.setattr(launcher.sys, "argv", ["kvbake-launch-vllm", "--force"])
    with pytest.raises(SystemExit) as caught:
        launcher.main()
    assert caught.value.code == 2


def test_a_refused_start_is_one_line_that_says_starting() -> None:
    client = FakeClient(refuse="Error response from daemon: no such image")
    try:
        launcher.carry_out(client, run_of(), "ssh://ops@spark-a")
    except launcher.EngineFailure as err:
        text = str(err)
    assert says(text, "starting vllm-serve on ssh://ops@spark-a failed") and says(text, "no such image")


def test_a_missing_env_file_says_how_to_get_one(tmp_path: Path) -> None:
    step = dataclasses.replace(run_of(), env_file=str(tmp_path / "absent.env"))
    with pytest.raises(core.LaunchInputError) as caught:
        launcher.switch_names_of(step)
    assert caught.value.fix.startswith("run the launcher through kvbake deploy, or point KVBAKE_ENV_FILE")
    assert says(caught.value.fix, "that `python build.py config` wrote")
