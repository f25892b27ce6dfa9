"""Secrets by name everywhere: which options and variables are secrets (the lists are written out here), their values
withheld from a command line, a shell's script, labels and a create spec and restored from the environment; a `--rm`
serve adopted with an API key in its command line is recreated with it; what an older kvbake wrote in clear goes at the
next write of the node's records or the journal, which says so."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from kvbake.errors import RolloutError
from kvbake.secret_env import SECRET_OPTIONS, restore_args, split_env_list, withhold_args, withhold_labels
from kvbake.serve.core.vllm_options import read_option, serve_options
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.nodestate import STATE_DIR, STATE_NAME, NodeState
from kvbake.ship.core.create_spec import create_spec, spec_differences, with_secrets
from kvbake.ship.core.journal import JOURNAL, Journal, NodePlan, write_journal
from kvbake.ship.core.noderecords import SLOTS, decode, encode
from kvbake.ship.core.release import Release, release_to_json
from kvbake.ship.core.withheld_records import withhold_adopted

from fake_fleet import CONTAINER, CONTROL, World, deploy, interrupted_deploy, make_world

# Plain values: nothing but their names makes them secrets (the credential scan sees nothing in them).
KEY = "plain-api-key-value-1"
TOKEN = "plain-hf-token-value-2"
API_KEY_NOTE = "(secret: from VLLM_API_KEY where kvbake runs)"
EXPECTED_SECRET_OPTIONS = {"--api-key": "VLLM_API_KEY", "--hf-token": "HF_TOKEN", "--redis-password": "RAY_REDIS_PASSWORD"}
SECRET_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY",
                    "GITHUB_TOKEN", "REDIS_PASSWORD", "TOKEN", "hf_token")
NEAR_MISSES = ("MAX_TOKENS", "VLLM_MAX_NUM_BATCHED_TOKENS", "MAX_TOKEN_LEN", "TOKENIZERS_PARALLELISM", "HF_TOKEN_PATH",
               "VLLM_API_KEY_FILE", "PASSWORD_FILE", "NCCL_SOCKET_IFNAME")


def test_the_secret_options_are_exactly_these_each_restored_from_its_variable():
    assert SECRET_OPTIONS == EXPECTED_SECRET_OPTIONS
    for option, variable in EXPECTED_SECRET_OPTIONS.items():
        assert withhold_args(["x", option, KEY]) == (["x", option, f"(secret: from {variable} where kvbake runs)"], (variable,))


@pytest.mark.parametrize("option", ["--api-key", "--hf-token"])
def test_the_vllm_secret_options_are_options_vllm_has(option):
    assert read_option(option, serve_options()).arity is not None


@pytest.mark.parametrize("option, value", [("--max-num-batched-tokens", "8192"), ("--tokenizer", "org/tokenizer"),
                                           ("--ssl-keyfile", "/etc/ssl/private/serve.key")])
def test_an_option_that_only_sounds_secret_is_kept(option, value):
    argv = ["vllm", "serve", "/m", option, value, f"{option}={value}"]
    assert withhold_args(argv) == (argv, ())


@pytest.mark.parametrize("name", SECRET_VARIABLES)
def test_a_variable_is_a_secret_by_its_name_whatever_its_value(name):
    assert split_env_list([f"{name}=plain", "A=1"]) == (["A=1"], (name,))


@pytest.mark.parametrize("name", NEAR_MISSES)
def test_a_variable_whose_name_only_looks_like_a_secrets_is_kept(name):
    assert split_env_list([f"{name}=plain"]) == ([f"{name}=plain"], ())


def test_every_key_of_api_key_and_every_spelling_is_withheld_and_restored():
    argv = ["vllm", "serve", "/m", "--api-key", KEY, "second-key", "--port", "8000", f"--api_key={KEY}", "--hf-token", "--enforce-eager"]
    withheld, names = withhold_args(argv)
    assert withheld == ["vllm", "serve", "/m", "--api-key", API_KEY_NOTE, "(secret: from VLLM_API_KEY_2 where kvbake runs)", "--port",
                        "8000", f"--api_key={API_KEY_NOTE}", "--hf-token", "--enforce-eager"], "a bare --hf-token holds no secret"
    assert names == ("VLLM_API_KEY", "VLLM_API_KEY_2")
    assert restore_args(withheld, {"VLLM_API_KEY": KEY, "VLLM_API_KEY_2": "second-key"}) == argv
    assert withhold_args(withheld) == (withheld, names), "withheld once is withheld"


def test_a_secret_in_a_shells_script_is_withheld_where_it_stands_and_restored():
    script = f"vllm serve /m --api-key '{KEY}' --hf-token={TOKEN} && ray start --block --redis-password \"$REDIS_PASSWORD\""
    argv = ["sh", "-c", script]
    withheld, names = withhold_args(argv)
    assert KEY not in json.dumps(withheld) and TOKEN not in json.dumps(withheld) and names == ("HF_TOKEN", "VLLM_API_KEY")
    assert '--redis-password "$REDIS_PASSWORD"' in withheld[2], "a reference to a variable holds no secret"
    assert restore_args(withheld, {"VLLM_API_KEY": KEY, "HF_TOKEN": TOKEN}) == argv
    assert withhold_args(withheld) == (withheld, names)


def test_a_label_is_withheld_by_its_name_or_the_command_line_it_holds():
    labels = {"org.example.hf_token": TOKEN, "org.example.command": f"vllm serve /m --api-key {KEY}", "org.example.model": "m"}
    assert withhold_labels(labels) == {"org.example.hf_token": "(secret: from ORG_EXAMPLE_HF_TOKEN where kvbake runs)",
                                       "org.example.command": f"vllm serve /m --api-key {API_KEY_NOTE}", "org.example.model": "m"}


def inspect_of(config: dict, container_id: str = "c1") -> dict:
    return {"Id": container_id, "Image": "sha256:i", "Name": "/serve", "Config": config, "HostConfig": {"AutoRemove": True}}


def test_a_create_spec_holds_no_secret_and_gives_the_recreated_container_every_one_back():
    config = {"Entrypoint": ["sh", "-c", f"exec vllm serve /m --api-key {KEY} \"$@\""], "Cmd": ["--hf-token", TOKEN],
              "Labels": {"org.example.hf_token": TOKEN}, "Env": ["PATH=/usr/bin", f"HF_TOKEN={TOKEN}"]}
    spec = create_spec(inspect_of(config))
    assert KEY not in json.dumps(spec) and TOKEN not in json.dumps(spec)
    assert (spec["secret_env"], spec["secret_args"]) == (["HF_TOKEN"], ["HF_TOKEN", "ORG_EXAMPLE_HF_TOKEN", "VLLM_API_KEY"])
    recreated = with_secrets(spec, {"VLLM_API_KEY": KEY, "HF_TOKEN": TOKEN, "ORG_EXAMPLE_HF_TOKEN": TOKEN})
    assert recreated["config"] == config and "secret_args" not in recreated and "secret_env" not in recreated
    assert spec_differences(spec, create_spec(inspect_of(recreated["config"], "c2"))) == []
    older = {"image": "sha256:i", "name": "serve", "config": {**config, "Env": ["PATH=/usr/bin"]}, "host": {"AutoRemove": True},
             "secret_env": ["HF_TOKEN"]}
    assert spec_differences(older, create_spec(inspect_of(config, "c2"))) == [], "as an older kvbake recorded it, in clear: the same"


def test_an_adopted_serves_docker_exec_an_older_kvbake_recorded_is_withheld_the_same_way():
    older = {"argv": ["vllm", "serve", "/m", "--api-key", API_KEY_NOTE, "--hf-token", TOKEN], "env": {"MY_API_KEY": KEY, "A": "1"},
             "cwd": "/srv", "user": "0", "secret_env": ["HF_TOKEN"], "secret_args": ["VLLM_API_KEY"]}
    adopted = withhold_adopted({"container_id": "c1", "exec": older, "ray_exec": older, "serve_argv": older["argv"]})
    assert not holds_a_secret([json.dumps(adopted).encode()])
    withheld = {**older, "argv": [*older["argv"][:-1], "(secret: from HF_TOKEN where kvbake runs)"], "env": {"A": "1"},
                "secret_env": ["HF_TOKEN", "MY_API_KEY"], "secret_args": ["HF_TOKEN", "VLLM_API_KEY"]}
    assert (adopted["exec"], adopted["ray_exec"], adopted["serve_argv"]) == (withheld, withheld, withheld["argv"])
    assert withhold_adopted(adopted) == adopted


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return make_world(tmp_path, monkeypatch)


def rm_serves_with_secrets(world: World) -> None:
    """vLLM the main process of a `--rm` container, its API key on its command line and a token in its environment."""
    for engine in world.engines.values():
        engine.run_serving(CONTAINER, "base:1", ["LANG=C", f"HF_TOKEN={TOKEN}"], ("--max-model-len", "4096", "--api-key", KEY),
                           host={"AutoRemove": True})


def everything_written(world: World) -> list[bytes]:
    """Every file kvbake wrote: on the nodes (records, journal copies, audit log) and on this host."""
    written = [data for engine in world.engines.values() for files in engine.files.values() for data in files.values()]
    return written + [path.read_bytes() for path in world.fleet.deployment.state_dir.rglob("*") if path.is_file()]


def holds_a_secret(written: list[bytes]) -> bool:
    return any(KEY.encode() in data or TOKEN.encode() in data for data in written)


def test_a_rm_serve_with_secrets_in_its_command_line_is_adopted_by_name_and_recreated_with_them(world, monkeypatch):
    rm_serves_with_secrets(world)
    releases = adopt(world.fleet, "seed serve", False)
    assert not holds_a_secret([json.dumps({node: r.adopted for node, r in releases.items()}).encode()])
    assert releases["a"].adopted["spec"]["secret_args"] == ["VLLM_API_KEY"]
    monkeypatch.delenv("VLLM_API_KEY")
    before = world.snapshot()
    with pytest.raises(RolloutError, match="node a: the adopted serve needs VLLM_API_KEY to come back"):
        deploy(world, CONTROL)
    assert world.snapshot() == before, "refused before anything moved"
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    deploy(world, CONTROL)
    rollout.rollback(world.fleet, False)
    for engine in world.engines.values():
        serving = engine.containers[CONTAINER]
        assert serving["Id"] not in {r.adopted["container_id"] for r in releases.values()}, "recreated from its spec"
        assert serving["Config"]["Cmd"][-2:] == ["--api-key", KEY] and f"HF_TOKEN={TOKEN}" in serving["Config"]["Env"]
    assert len(everything_written(world)) > 2 and not holds_a_secret(everything_written(world))


def in_clear_release(release: Release | None) -> Release | None:
    """An adopted serve's record as an older kvbake wrote it: its command line in clear, no `secret_args`."""
    if release is None or not release.adopted:
        return release
    adopted = json.loads(json.dumps(release.adopted).replace(API_KEY_NOTE, KEY))
    adopted["spec"].pop("secret_args")
    return replace(release, adopted=adopted)


def written_by_an_older_kvbake(world: World) -> None:
    """Each node's records as an older kvbake wrote them: the adopted serve's command line in clear, in both slots."""
    for engine in world.engines.values():
        files = engine.files[STATE_NAME]
        for slot in SLOTS:
            path = f"{STATE_DIR}/{slot}"
            records = decode("n", {slot: files[path]})
            in_clear = {key: in_clear_release(getattr(records, key)) for key in ("current", "previous", "adopted")}
            files[path] = encode(replace(records, **in_clear), records.seq)
    assert holds_a_secret(everything_written(world))


def test_a_secret_an_older_kvbake_wrote_into_a_nodes_records_goes_at_the_next_write_which_says_so(world, caplog):
    rm_serves_with_secrets(world)
    adopt(world.fleet, "seed serve", False)
    deploy(world, CONTROL)
    written_by_an_older_kvbake(world)
    with caplog.at_level(logging.WARNING):
        NodeState("a", world.engines["a"]).append_audit("base:1", "one write")
        assert [record.getMessage() for record in caplog.records] == [
            "scrubbed a secret value an older kvbake wrote into the release records on a"]
        assert not holds_a_secret(list(world.engines["a"].files[STATE_NAME].values())), "gone from both slots at once"
        rollout.rollback(world.fleet, False)
    said = [record.getMessage() for record in caplog.records]
    assert said.count("scrubbed a secret value an older kvbake wrote into the release records on b") == 1, said
    assert not holds_a_secret(everything_written(world))


def test_a_secret_an_older_kvbake_wrote_into_the_journal_goes_at_its_next_write_which_says_so(tmp_path, caplog):
    adopted = replace(CONTROL, preset="adopted", adopted={"container_id": "c1", "kept_as": "serve-kept", "exec": None,
                                                           "spec": create_spec(inspect_of({"Cmd": ["vllm", "serve", "--api-key", KEY]}))})
    in_clear = json.loads(release_to_json(adopted).replace(API_KEY_NOTE, KEY))
    plan = NodePlan("a", "sha256:1", None, "sha256:2", "sha256:1", {"current": in_clear}, {"current": None})
    journal = Journal("deploy-1", "deploy", CONTROL.id, (plan,))
    (tmp_path / JOURNAL).write_text(json.dumps({"id": "deploy-1", "nodes": [{"before_records": {"current": in_clear}}]}))
    with caplog.at_level(logging.WARNING):
        write_journal(tmp_path, journal)
    assert [record.getMessage() for record in caplog.records] == ["scrubbed a secret value an older kvbake wrote into the journal on this host"]
    assert KEY not in (tmp_path / JOURNAL).read_text() and API_KEY_NOTE in (tmp_path / JOURNAL).read_text()
    caplog.clear()
    write_journal(tmp_path, journal)
    assert not caplog.records, "said once: the journal holds no secret any more"


def test_a_recovery_that_would_bring_the_adopted_serve_back_needs_its_secrets_first(world, monkeypatch):
    rm_serves_with_secrets(world)
    adopt(world.fleet, "seed serve", False)
    interrupted_deploy(world, CONTROL)
    world.advance(world.fleet.deployment.lock_stale_after_s)
    monkeypatch.delenv("VLLM_API_KEY")
    before = world.snapshot()
    with pytest.raises(RolloutError, match="node a: the adopted serve needs VLLM_API_KEY to come back"):
        rollout.recover(world.fleet, "revert", True)
    assert world.snapshot() == before
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    rollout.recover(world.fleet, "revert", True)
    assert world.snapshot()["journal"] is None
