"""kv_arith's option checks: each refusal names the option and says what to pass; the pressure and packing inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.kvarith_cli import config, run_cli  # noqa: F401  (config is a fixture)
from kvbake.kvarith.examples import v41_flash_config
from kvbake.kvarith.pressure import DEFAULT_MEM_FLOOR
from tests.unit.message_words import says




def refusal(code: int, out: str, err: str) -> str:
    """The one line a refusal prints, after checking it is exit 17 with nothing on stdout."""
    assert (code, out) == (17, ""), err
    assert err.startswith("error: ") and err.count("\n") == 1
    return err.removeprefix("error: ")


def test_an_empty_config_is_named_and_its_fix_asks_for_the_path() -> None:
    line = refusal(*run_cli("--config", "", "--max-model-len", "1000", "--pool-bytes", "1GiB"))
    assert says(line, "--config is empty; fix: pass the path of the model's config.json")


@pytest.mark.parametrize("argv", [["--max-model-len", "1000"], ["--config", "c.json"], []])
def test_config_and_length_are_both_required(argv: list[str]) -> None:
    line = refusal(*run_cli(*argv, "--pool-bytes", "1GiB"))
    assert says(line, "--config and --max-model-len are required; fix: pass both, or use --self-test")


@pytest.mark.parametrize(("option", "value"), [("--mix", "1000"), ("--chunk-tokens", "64"), ("--mem-available", "1GiB"),
                                               ("--mem-floor", "1GiB"), ("--output-tokens", "5")])
def test_a_pressure_option_without_pressure_is_named(config: str, option: str, value: str) -> None:
    line = refusal(*run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", option, value))
    assert says(line, f"{option} is used only with --pressure; fix: add --pressure, or drop the option")


def test_no_output_tokens_is_not_a_pressure_option(config: str) -> None:
    code, _, _ = run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", "--output-tokens", "0")
    assert code == 0


def test_a_floor_without_memory_available_is_refused(config: str) -> None:
    line = refusal(*run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", "--pressure",
                            "--mix", "500", "--mem-floor", "1GiB"))
    assert says(line, "--mem-floor is used only with --mem-available; fix: pass both, or neither")


def test_pressure_needs_a_mix_and_a_pool(config: str) -> None:
    line = refusal(*run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", "--pressure"))
    assert says(line, "--pressure needs a request mix; fix: pass --mix LENGTH[xCOUNT],...")
    line = refusal(*run_cli("--config", config, "--max-model-len", "1000", "--pressure", "--mix", "500"))
    assert says(line, "--pressure needs a pool; fix: pass --pool-bytes SIZE or --num-blocks N")


def test_pressure_takes_a_block_count_as_its_pool(config: str) -> None:
    code, out, _ = run_cli("--config", config, "--max-model-len", "1000", "--num-blocks", "100", "--pressure", "--mix", "500",
                           "--json")
    assert code == 0 and json.loads(out)["pressure"]["pool_for_test"] == 100 * 230_400


def test_no_pool_and_no_solve_is_refused(config: str) -> None:
    line = refusal(*run_cli("--config", config, "--max-model-len", "1000"))
    assert says(line, "no pool given; fix: pass --pool-bytes SIZE or --num-blocks N (or only --solve-tokens T)")


@pytest.mark.parametrize("item", ["swa", "=2", " =2", "swa=0", "swa=x", "swa=-1"])
def test_a_pack_that_is_not_group_equals_k_is_refused(config: str, item: str) -> None:
    line = refusal(*run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", "--pack", item))
    assert says(line, f"--pack {item!r} is not GROUP=k with k >= 1; fix: write e.g. --pack swa=2")


def test_a_pack_factor_above_the_limit_names_the_group(config: str) -> None:
    line = refusal(*run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", "--pack", "swa=65537"))
    assert says(line, "--pack swa 65,537 is above the limit 65,536")


def test_a_pack_of_one_is_accepted_and_shown_as_one(config: str) -> None:
    code, out, _ = run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", "--pack", "swa=1", "--json")
    assert code == 0 and {g["pack"] for g in json.loads(out)["groups"]} == {1}


def test_a_group_packed_twice_is_refused(config: str) -> None:
    line = refusal(*run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", "--pack", "swa=2",
                            "--pack", "swa=3"))
    assert says(line, "--pack names 'swa' twice; fix: give each group or bucket one factor")


def test_pressure_is_predicted_for_the_smallest_rank_pool_with_the_documented_defaults(config: str) -> None:
    code, out, _ = run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "2GiB,1GiB", "--pressure",
                           "--mix", "500x2", "--json")
    assert code == 0
    pressure = json.loads(out)["pressure"]
    assert pressure["pool_for_test"] == 1 << 30
    assert pressure["requests"][0]["count"] == 2 and pressure["requests"][0]["prompt_tokens"] == 500


def test_memory_available_grows_the_pool_down_to_the_default_floor(config: str) -> None:
    code, out, _ = run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", "--pressure",
                           "--mix", "500", "--mem-available", "2GiB", "--json")
    assert code == 0 and json.loads(out)["pressure"]["pool_for_test"] == (1 << 30) + (2 << 30) - DEFAULT_MEM_FLOOR
    code, out, _ = run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", "--pressure",
                           "--mix", "500", "--mem-available", "2GiB", "--mem-floor", "1GiB", "--json")
    assert code == 0 and json.loads(out)["pressure"]["pool_for_test"] == 2 << 30


def test_the_chunk_defaults_to_the_batched_tokens(config: str) -> None:
    def held(*extra: str) -> int:
        code, out, _ = run_cli("--config", config, "--max-model-len", "100000", "--pool-bytes", "10GiB", "--pressure",
                               "--mix", "90000", "--json", *extra)
        assert code == 0
        return json.loads(out)["pressure"]["requests"][0]["held_blocks"]

    assert held() == held("--chunk-tokens", "2048") == held("--max-num-batched-tokens", "2048")
    assert held("--max-num-batched-tokens", "512") == held("--max-num-batched-tokens", "512", "--chunk-tokens", "512")
    assert held() != held("--chunk-tokens", "512")


SMALL = v41_flash_config() | {"num_hidden_layers": 12, "compress_ratios": [0, 0] + [2] * 5 + [1] * 5,
                              "kv_source_layer_ids": [2, 6], "index_source_layer_ids": [2, 6, 8]}


def test_a_packed_group_reaches_the_pressure_prediction(tmp_path: Path) -> None:
    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL))

    def held(*extra: str) -> int:
        code, out, err = run_cli("--config", str(path), "--max-model-len", "100000", "--pool-bytes", "10GiB", "--pressure",
                                 "--mix", "90000", "--json", *extra)
        assert code == 0, err
        return json.loads(out)["pressure"]["requests"][0]["held_blocks"]

    assert held("--pack", "swa=2") < held() == held("--pack", "ring=1")


def test_text_output_ends_with_the_pressure_report(config: str) -> None:
    code, out, _ = run_cli("--config", config, "--max-model-len", "1000", "--pool-bytes", "1GiB", "--pressure", "--mix", "500")
    assert code == 0 and "Pressure (every request of the mix resident together):" in out
    assert out.rstrip("\n").splitlines()[-1].startswith("  preemption: not required")


def test_solve_without_a_pool_prints_json_or_text(config: str) -> None:
    code, out, _ = run_cli("--config", config, "--max-model-len", "327680", "--solve-tokens", "1604926", "--json")
    assert code == 0 and json.loads(out)["solve_tokens"]["target"] == 1604926 and out.endswith("}\n")
    code, out, _ = run_cli("--config", config, "--max-model-len", "327680", "--solve-tokens", "1604926")
    assert code == 0 and out.startswith("DeepSeek-V4.1-Flash at max-model-len 327,680")


def test_an_analysis_prints_json_or_text(config: str) -> None:
    code, out, _ = run_cli("--config", config, "--max-model-len", "327680", "--pool-bytes", "10GiB", "--json")
    assert code == 0 and json.loads(out)["num_blocks"] == 46_603 and out.endswith("}\n")
    code, out, _ = run_cli("--config", config, "--max-model-len", "327680", "--pool-bytes", "10GiB")
    assert code == 0 and "vLLM logs: GPU KV cache size:" in out


def test_an_unknown_option_is_a_usage_error_with_exit_2() -> None:
    code, out, err = run_cli("--bogus")
    assert (code, out) == (2, "") and says(err, "see kv_arith --help")


def test_a_packed_group_reaches_a_pool_less_solution(tmp_path: Path) -> None:
    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL))

    def per_request(*extra: str) -> int:
        code, out, err = run_cli("--config", str(path), "--max-model-len", "100000", "--solve-tokens", "1000", "--json", *extra)
        assert code == 0, err
        return json.loads(out)["blocks_per_request"]

    assert per_request("--pack", "swa=2") < per_request()


def test_a_pool_less_solution_without_any_block_count_says_so_with_r(config: str) -> None:
    code, out, _ = run_cli("--config", config, "--max-model-len", "327680", "--solve-tokens", "1604926")
    assert code == 0
    assert out.splitlines()[-1] == "Solve 1,604,926: no block count N gives this token count at R = 3,093"


def pressure_request(config: str, *extra: str) -> dict:
    code, out, err = run_cli("--config", config, "--max-model-len", "327680", "--pool-bytes", "10GiB", "--pressure", "--mix", "100000",
                             "--json", *extra)
    assert code == 0, err
    return json.loads(out)["pressure"]["requests"][0]


def test_a_sliding_window_holds_its_window_less_one_plus_the_chunk(config: str) -> None:
    # 127 + 3 tokens can straddle 6 blocks of 32 in each of the 4 window groups; the 8 compressed layers hold
    # cdiv(100,000, 128) = 782 blocks and the ring 1
    assert pressure_request(config, "--chunk-tokens", "3")["held_blocks"] == 4 * 6 + 782 + 1


def test_retained_lookahead_tokens_widen_the_window_and_its_admission_cap(config: str) -> None:
    # --spec-tokens 3 with 2 MTP layers retains 2 extra tokens: the cap is 127 + 2 + 4,096 = 4,225 tokens, 133 blocks + 1
    request = pressure_request(config, "--spec-tokens", "3", "--mtp-layers", "2")
    assert request["admission_blocks"] == 4 * 134 + 782 + 1
    assert pressure_request(config, "--chunk-tokens", "1", "--spec-tokens", "3", "--mtp-layers", "2")["held_blocks"] == 807
