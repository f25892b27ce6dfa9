"""Secrets (tokens, API keys) are carried by name only: init writes their names, the launcher passes their values from
the environment it runs in through a private env file, adopt records them by name and brings the serve back with them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from kvbake.errors import RolloutError
from kvbake.launcher import cli as launcher
from kvbake.launcher.core import launch_plan as core
from kvbake.secret_env import missing_secrets, restore_args, split_env_list, split_secrets, withhold_args
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.adoption import adopt, rollback_to_adopted
from kvbake.ship.core.create_spec import create_spec, with_secrets

from fake_fleet import CONTAINER, CONTROL, World, deploy, make_world
from test_launcher import FakeClient, env_file, env_for

TOKEN = "hf_" + "a1B2c3D4e5" * 4  # what a Hugging Face token looks like; never a real one
KEY = "sk-local-test-key-0123456789"


def test_a_variable_is_a_secret_by_its_name_or_by_a_value_that_looks_like_a_credential():
    plain, names = split_secrets({"HF_TOKEN": "x", "VLLM_API_KEY": "y", "MY_TOKEN": TOKEN, "NCCL_SOCKET_IFNAME": "enp1"})
    assert plain == {"NCCL_SOCKET_IFNAME": "enp1"} and names == ("HF_TOKEN", "MY_TOKEN", "VLLM_API_KEY")
    assert split_env_list(["PATH=/usr/bin", f"HF_TOKEN={TOKEN}", "A=1"]) == (["PATH=/usr/bin", "A=1"], ("HF_TOKEN",))
    assert missing_secrets(["HF_TOKEN", "VLLM_API_KEY"], {"HF_TOKEN": TOKEN, "VLLM_API_KEY": ""}) == ["VLLM_API_KEY"]


# The variables a serve's tokens and API keys travel in (Hugging Face's two names, vLLM's and the OpenAI client's key),
# listed here on their own: a name dropped from kvbake's list must fail this test, not change its answer.
NAMED_SECRETS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "OPENAI_API_KEY")


@pytest.mark.parametrize("name", NAMED_SECRETS)
def test_each_named_secret_variable_is_withheld_though_its_value_looks_like_no_credential(name):
    plain, names = split_secrets({name: "abc", "A": "1"})
    assert plain == {"A": "1"} and names == (name,)
    assert split_env_list([f"{name}=abc", "A=1"]) == (["A=1"], (name,))


def test_a_secret_option_is_withheld_in_either_spelling_and_restored_from_the_environment():
    argv = ["vllm", "serve", "/m", "--api-key", KEY, "--port", "8000"]
    withheld, names = withhold_args(argv)
    assert KEY not in " ".join(withheld) and names == ("VLLM_API_KEY",) and withheld[:4] == ["vllm", "serve", "/m", "--api-key"]
    assert restore_args(withheld, {"VLLM_API_KEY": KEY}) == argv
    joined, _ = withhold_args(["vllm", "serve", f"--api-key={KEY}"])
    assert KEY not in " ".join(joined) and restore_args(joined, {"VLLM_API_KEY": KEY}) == ["vllm", "serve", f"--api-key={KEY}"]


def test_a_create_spec_keeps_secrets_by_name_and_gets_them_back_from_the_environment():
    inspect = {"Id": "c1", "Image": "sha256:i", "Name": "/serve", "Config": {"Env": ["PATH=/usr/bin", f"HF_TOKEN={TOKEN}"], "Cmd": ["x"]},
               "HostConfig": {}}
    spec = create_spec(inspect)
    assert TOKEN not in json.dumps(spec) and spec["secret_env"] == ["HF_TOKEN"] and spec["config"]["Env"] == ["PATH=/usr/bin"]
    assert with_secrets(spec, {"HF_TOKEN": TOKEN})["config"]["Env"] == ["PATH=/usr/bin", f"HF_TOKEN={TOKEN}"]
    assert "secret_env" not in with_secrets(spec, {"HF_TOKEN": TOKEN})


def test_the_launcher_passes_secrets_by_name_and_refuses_one_it_does_not_hold(capsys, tmp_path):
    env = {**env_for(SECRET_ENV='["HF_TOKEN"]', HF_TOKEN=TOKEN), "KVBAKE_ENV_FILE": str(env_file(tmp_path))}
    assert launcher.run(["--print"], env) == 0
    printed = capsys.readouterr().out
    assert "--env HF_TOKEN " in printed and TOKEN not in printed
    missing = {k: v for k, v in env.items() if k != "HF_TOKEN"}
    assert launcher.run(["--print"], missing) == 2
    assert "SECRET_ENV names HF_TOKEN, which is not set where the launcher runs; fix: export HF_TOKEN" in capsys.readouterr().err


def test_the_launcher_hands_docker_the_secrets_in_a_private_file_it_removes(tmp_path):
    env = env_for(SECRET_ENV='["HF_TOKEN"]', HF_TOKEN=TOKEN)
    step = core.plan(env)
    seen = {}

    class Client(FakeClient):
        def run(self, image, command, **options):
            path = Path(options["env_files"][-1])
            seen.update(text=path.read_text(), mode=stat.S_IMODE(path.stat().st_mode), path=path)
            return super().run(image, command, **options)

    launcher.carry_out(Client(set()), step, "h", env)
    assert seen["text"] == f"HF_TOKEN={TOKEN}\n" and seen["mode"] == 0o600 and not seen["path"].exists()
    assert TOKEN not in json.dumps(step.whales_options())


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def exec_serves_with_secrets(world: World) -> None:
    """eugr's shape with a token: `docker exec -e HF_TOKEN=… vllm_node vllm serve … --api-key …`."""
    for engine in world.engines.values():
        engine.run_serving(CONTAINER, "base:1", ["LANG=C"], main=("sleep", "infinity"))
        engine.exec_detached(CONTAINER, ["python3", "/usr/local/bin/vllm", "serve", "/models/m", "--max-model-len", "4096", "--api-key", KEY],
                             {"HF_TOKEN": TOKEN}, "/srv", "0")
        engine.containers[CONTAINER]["Processes"] = engine.containers[CONTAINER]["Processes"][:1] + engine.containers[CONTAINER]["Processes"][2:]


def test_adopt_records_secrets_by_name_and_brings_the_serve_back_with_them(world, monkeypatch):
    exec_serves_with_secrets(world)
    releases = adopt(world.fleet, "seed serve", False)
    recorded = json.dumps({node: r.adopted for node, r in releases.items()})
    assert TOKEN not in recorded and KEY not in recorded
    assert (releases["a"].adopted["exec"]["secret_env"], releases["a"].adopted["exec"]["secret_args"]) == (["HF_TOKEN"], ["VLLM_API_KEY"])
    written = [data for engine in world.engines.values() for files in engine.files.values() for data in files.values()]
    written += [path.read_bytes() for path in world.fleet.deployment.state_dir.rglob("*") if path.is_file()]
    assert len(written) > 2 and not any(TOKEN.encode() in data or KEY.encode() in data for data in written), \
        "no record, journal or audit line on the nodes or this host holds a secret"
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    before = world.snapshot()
    with pytest.raises(RolloutError, match="node a: the adopted serve needs HF_TOKEN, VLLM_API_KEY to come back"):
        deploy(world, CONTROL)
    assert world.snapshot() == before, "refused before anything moved"
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    deploy(world, CONTROL)
    rollback_to_adopted(world.fleet, False)
    for engine in world.engines.values():
        name, argv, env, cwd, _ = engine.execs[-1]
        assert name == CONTAINER and argv[-2:] == ["--api-key", KEY] and env == {"HF_TOKEN": TOKEN} and cwd == "/srv"
    rollout.rollback(world.fleet, False)
