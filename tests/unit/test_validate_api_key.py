"""`validate` against a serve started with an API key: the key is taken by name from the environment (VLLM_API_KEY, or
the variable --api-key-env names) and sent as a Bearer token; a key the serve refuses, or a key the deployment needs and
the environment lacks, stops the run with exit 2 before anything is judged, and never rolls the window back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_fleet import World
from kvbake.cli import main
from kvbake.errors import UsageError
from message_words import says
from test_validate_command_rollback import SMALL, project, reports, world  # noqa: F401 (fixtures)
from tests.doubles.openai_double import OpenAIDouble

KEY = "sk-kvbake-unit-only-0123456789"


def validate(project: Path, endpoint: str, *argv: str) -> int:
    return main(["validate", "--manifest", str(project / "manifest.yaml"), "--preset", "control", "--endpoint", endpoint,
                 *argv, *SMALL])


def with_secret_env(options: list[str], *names: str) -> list[str]:
    """The world's deployment file with launcher.env SECRET_ENV naming `names`, as init writes it for a keyed serve."""
    path = Path(options[options.index("--deploy") + 1])
    document = json.loads(path.read_text())
    document["launcher"]["env"] = {"SECRET_ENV": json.dumps(list(names))}
    path.write_text(json.dumps(document))
    return options


def test_the_key_in_vllm_api_key_is_sent_and_written_nowhere(project: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    with OpenAIDouble(api_key=KEY) as serve:
        assert validate(project, serve.url) == 0, capsys.readouterr().err
        assert serve.counts["completion"] > 0
    assert all(KEY not in path.read_text() for path in (project / ".kvbake").rglob("*") if path.is_file())


def test_another_variable_named_by_api_key_env_is_read(project: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.setenv("SERVE_KEY", KEY)
    with OpenAIDouble(api_key=KEY) as serve:
        assert validate(project, serve.url, "--api-key-env", "SERVE_KEY") == 0, capsys.readouterr().err


@pytest.mark.parametrize(("sent", "said"), [(None, "no API key was sent"), ("sk-not-the-serves-own", "the API key sent is not the serve's own")])
def test_a_serve_that_refuses_the_key_stops_the_run_with_exit_2_and_no_report(project: Path, monkeypatch, capsys, sent, said) -> None:
    if sent is None:
        monkeypatch.delenv("VLLM_API_KEY", raising=False)
    else:
        monkeypatch.setenv("VLLM_API_KEY", sent)
    with OpenAIDouble(api_key=KEY) as serve:
        assert validate(project, serve.url) == UsageError.exit_code
        assert serve.counts["completion"] == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says(err, "refused the request (HTTP 401)") and says(err, said)
    assert says(err, "export the serve's API key where kvbake runs, as VLLM_API_KEY")
    assert reports(project) == [], "nothing was judged: no report"


def test_a_refused_key_never_rolls_the_window_back(project: Path, world: World, monkeypatch, capsys) -> None:
    options = world.command_line(monkeypatch, manifest=project / "manifest.yaml")
    monkeypatch.setenv("VLLM_API_KEY", "sk-not-the-serves-own")
    before = world.snapshot()
    with OpenAIDouble(api_key=KEY) as serve:
        assert validate(project, serve.url, *options[2:], "--rollback-on-failure") == UsageError.exit_code
    assert world.snapshot() == before, "no rank was rolled back for a key the serve refused"
    assert says(capsys.readouterr().err, "HTTP 401")


def test_a_key_the_deployment_needs_and_the_environment_lacks_stops_before_anything_is_sent(project: Path, world: World,
                                                                                              monkeypatch, capsys) -> None:
    options = with_secret_env(world.command_line(monkeypatch, manifest=project / "manifest.yaml"), "HF_TOKEN", "VLLM_API_KEY")
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with OpenAIDouble(api_key=KEY) as serve:
        assert validate(project, serve.url, *options[2:]) == UsageError.exit_code
        assert serve.counts == {"completion": 0, "tokenize": 0, "models": 0}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says(err, "takes its API key from VLLM_API_KEY (the deployment's SECRET_ENV)")
    assert says(err, "export VLLM_API_KEY") and says(err, "nothing was sent")


def test_a_deployment_that_names_no_key_runs_without_one(project: Path, world: World, monkeypatch, capsys) -> None:
    options = with_secret_env(world.command_line(monkeypatch, manifest=project / "manifest.yaml"), "HF_TOKEN")
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with OpenAIDouble() as serve:
        assert validate(project, serve.url, *options[2:]) == 0, capsys.readouterr().err


def test_an_api_key_env_that_is_no_variable_name_is_refused(project: Path, capsys) -> None:
    with OpenAIDouble() as serve:
        assert validate(project, serve.url, "--api-key-env", "VLLM-API-KEY") == UsageError.exit_code
        assert serve.counts["models"] == 0
    assert says(capsys.readouterr().err, "--api-key-env 'VLLM-API-KEY' is not a variable name")
