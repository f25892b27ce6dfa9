"""The KV arithmetic: anchors, config input, bad inputs and the command line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kvbake.errors import KvArithError
from kvbake.kvarith.anchors import run_anchors
from kvbake.kvarith.calculator import analyze
from kvbake.kvarith.capacity import GIB, ServeSettings, lookahead_extra_retained, parse_bytes, solve_tokens
from kvbake.kvarith.cli import main
from kvbake.kvarith.config import V4, V41, load_config, parse_config
from kvbake.kvarith.planner import approximate_gcd
from kvbake.kvarith.specs import SpecOptions

V41_CONFIG = {
    "model_type": "deepseek_v41", "num_hidden_layers": 40, "head_dim": 512, "qk_rope_head_dim": 64,
    "sliding_window": 128, "compress_ratios": [0, 0] + [2] * 18 + [1] * 20 + [0, 0, 0],
    "kv_source_layer_ids": [2, 8, 14, 20], "index_source_layer_ids": [2, 8, 14, 20, 24, 28, 32, 36],
    "index_head_dim": 128, "num_nextn_predict_layers": 3, "max_position_embeddings": 1048576,
}
V4_CONFIG = {
    "model_type": "deepseek_v4", "num_hidden_layers": 43, "head_dim": 512, "qk_rope_head_dim": 64,
    "sliding_window": 128, "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0], "index_head_dim": 128,
    "num_nextn_predict_layers": 1, "max_position_embeddings": 1048576,
}


def write(tmp_path: Path, data: object, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def run_model(config: dict, length: int, pool: int, mnbt: int = 2048, **kwargs):
    return analyze(parse_config(config), SpecOptions(), ServeSettings(length, mnbt, 2), [pool], **kwargs)


@pytest.mark.parametrize("result", run_anchors(), ids=lambda r: r.name)
def test_every_anchor_holds(result) -> None:
    assert result.actual == result.expected


def test_v41_pages_stride_and_groups() -> None:
    analysis = run_model(V41_CONFIG, 327_680, 10 * GIB)
    pages = {spec.role: spec.page_bytes for spec in analysis.specs}
    assert pages == {"swa": 19_008, "r2_kv": 37_440, "r1_kv": 74_880, "r2_indexer_k": 8_640,
                     "r1_indexer_k": 17_280, "ring": 32_768}
    assert analysis.layout.stride == 230_400
    assert [(g.bucket, len(g.layers), g.bytes_per_block) for g in analysis.layout.groups] == (
        [("swa", 10, 190_080)] * 4 + [("mla", 8, 230_400), ("ring", 3, 98_304)])
    assert analysis.capacity.num_blocks == 46_603
    assert analysis.capacity.blocks_per_request == 3_093
    assert analysis.capacity.log_line == ("GPU KV cache size: 4,937,236 tokens, Maximum concurrency for "
                                          "327,680 tokens per request: 15.07x")


def test_v41_r_at_16384_in_flight() -> None:
    assert run_model(V41_CONFIG, 327_680, 10 * GIB, mnbt=8192).capacity.blocks_per_request == 4_629


def test_v4_layout() -> None:
    analysis = run_model(V4_CONFIG, 327_680, 20 * GIB)
    assert approximate_gcd([43, 21, 20], 21) == 22
    assert analysis.layout.repeats_per_group == 22
    assert analysis.layout.stride == 1_002_240
    assert len(analysis.layout.groups) == 5
    assert analysis.capacity.blocks_per_request == 2_970
    assert (analysis.capacity.num_blocks, analysis.capacity.tokens) == (21_426, 2_363_929)


def test_v4_refused_at_7_25_gib_with_16384_in_flight() -> None:
    capacity = run_model(V4_CONFIG, 327_680, parse_bytes("7.25GiB"), mnbt=8192).capacity
    assert not capacity.fits
    assert "7.25 GiB" in capacity.refusal


def test_published_counts_follow_vllm_formula() -> None:
    n = 10 * GIB // 230_400
    assert n == 46_603
    assert [int(n / r * length) for r, length in ((9_515, 327_680), (6_102, 327_680), (8_662, 524_288))] == [
        1_604_926, 2_502_600, 2_820_756]


def test_solve_tokens_finds_the_block_count_vllm_used() -> None:
    assert 46_603 in solve_tokens(4_937_236, 3_093, 327_680)
    assert solve_tokens(1_604_926, 3_093, 327_680) == ()


def test_text_config_wrapper_is_unwrapped(tmp_path: Path) -> None:
    model = load_config(write(tmp_path, {"architectures": ["X"], "text_config": V41_CONFIG}))
    assert model.family == V41
    assert load_config(write(tmp_path, V4_CONFIG, "v4.json")).family == V4


def test_family_detected_from_fields_without_model_type() -> None:
    config = {k: v for k, v in V41_CONFIG.items() if k != "model_type"}
    assert parse_config(config).family == V41


def test_packing_a_group_that_fits_halves_its_demand() -> None:
    plain = run_model(V41_CONFIG, 327_680, 10 * GIB).capacity
    packed = run_model(V41_CONFIG, 327_680, 10 * GIB, packing={"ring": 2}).capacity
    assert packed.blocks_per_request == plain.blocks_per_request  # a ring takes one block either way
    assert [d.pack for d in packed.demands][-1] == 2


@pytest.mark.parametrize("config, named, fix_names", [
    ({**V41_CONFIG, "model_type": "llama"}, ("model type 'llama'",), "DeepSeek-V4.1-Flash"),
    ({"model_type": "deepseek_v4", "hidden_size": 7}, ("'deepseek_v4'", "'compress_ratios'", "'kv_source_layer_ids'"), "DeepSeek-V4"),
    ({k: v for k, v in V41_CONFIG.items() if k != "sliding_window"}, ("field 'sliding_window'",), "config.json"),
    ({**V41_CONFIG, "kv_source_layer_ids": [0, 8, 14, 20]}, ("'kv_source_layer_ids'", "layer 0", "compress_ratios"), "compressed layer"),
    ({**V41_CONFIG, "kv_source_layer_ids": [2, 8, 14, 99]}, ("'kv_source_layer_ids'", "layer 99", "0..39"), "layer list"),
    ({**V41_CONFIG, "compress_ratios": [0, 0, 2]}, ("'compress_ratios'", "3 entries", "num_hidden_layers is 40"), "compress ratio per layer"),
    ({**V4_CONFIG, "compress_ratios": [0, 0] + [4, 2] * 20 + [4, 0]}, ("compress_ratios", "'kv_source_layer_ids'"),
     "index_source_layer_ids"),
    ({**V4_CONFIG, "compress_ratios": [0, 0] + [4, 64] * 20 + [4, 0]}, ("'compress_ratios'", "64 at layer 3", "(0, 4, 128)"), "this model"),
    ({**V4_CONFIG, "head_dim": 256}, ("'head_dim'", "256"), "head_dim 512"),
])
def test_bad_config_names_the_field(config: dict, named: tuple[str, ...], fix_names: str) -> None:
    with pytest.raises(KvArithError) as info:
        parse_config(config)
    assert all(field in info.value.message for field in named), info.value.message
    assert fix_names in info.value.fix
    assert info.value.exit_code == 17


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(KvArithError) as caught:
        load_config(tmp_path / "absent.json")
    assert caught.value.exit_code == 17
    assert str(tmp_path / "absent.json") in caught.value.message and "does not exist" in caught.value.message
    assert "--config" in caught.value.fix


def test_config_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(KvArithError) as caught:
        load_config(path)
    assert caught.value.exit_code == 17
    assert all(field in caught.value.message for field in (str(path), "not JSON", "line 1"))
    assert "--config" in caught.value.fix


@pytest.mark.parametrize("pool", [0, -5])
def test_non_positive_pool_is_refused(pool: int) -> None:
    with pytest.raises(KvArithError) as caught:
        run_model(V41_CONFIG, 327_680, pool)
    assert caught.value.exit_code == 17
    assert f"pool of {pool} bytes" in caught.value.message and "not positive" in caught.value.message
    assert "per-rank KV bytes" in caught.value.fix


def test_pack_factor_that_exceeds_the_stride() -> None:
    with pytest.raises(KvArithError) as caught:
        run_model(V41_CONFIG, 327_680, 10 * GIB, packing={"mla": 2})
    assert caught.value.exit_code == 17
    assert all(field in caught.value.message for field in ("packing mla by 2", "460,800 B", "stride 230,400 B"))
    assert "k <= 1" in caught.value.fix and "mla" in caught.value.fix


def test_unknown_pack_group() -> None:
    with pytest.raises(KvArithError) as caught:
        run_model(V41_CONFIG, 327_680, 10 * GIB, packing={"kv": 2})
    assert caught.value.exit_code == 17
    assert "'kv'" in caught.value.message and "--pack" in caught.value.message
    assert all(group in caught.value.fix for group in ("mla", "ring", "swa.0", "swa.3"))


def test_max_model_len_above_max_positions() -> None:
    with pytest.raises(KvArithError) as caught:
        run_model(V41_CONFIG, 2_000_000, 10 * GIB)
    assert caught.value.exit_code == 17
    assert "max-model-len 2,000,000" in caught.value.message and "max_position_embeddings 1,048,576" in caught.value.message
    assert "--max-model-len 1048576" in caught.value.fix


def test_parse_bytes_units() -> None:
    assert parse_bytes("10GiB") == 10 * GIB
    assert parse_bytes("7.25 GiB") == 7 * GIB + GIB // 4
    assert parse_bytes("230400") == 230_400
    with pytest.raises(KvArithError) as caught:
        parse_bytes("3 parsecs")
    assert caught.value.exit_code == 17
    assert "'3 parsecs'" in caught.value.message and "unit 'parsecs'" in caught.value.message
    assert all(unit in caught.value.fix for unit in ("KiB", "GiB", "TB"))


def test_cli_text_report(tmp_path: Path) -> None:
    config = write(tmp_path, V41_CONFIG)
    code, out, err = run_cli("--config", str(config), "--max-model-len", "327680", "--pool-bytes", "10GiB")
    assert (code, err) == (0, "")
    assert "Stride: 230,400 B per block" in out
    assert "GPU KV cache size: 4,937,236 tokens" in out
    assert "vLLM starts" in out


def test_cli_json_and_refusal(tmp_path: Path) -> None:
    config = write(tmp_path, V4_CONFIG)
    code, out, _ = run_cli("--config", str(config), "--max-model-len", "327680", "--pool-bytes", "7.25GiB",
                           "--max-num-batched-tokens", "8192", "--json")
    data = json.loads(out)
    assert code == 0
    assert (data["fits"], data["stride"], data["num_blocks"]) == (False, 1_002_240, 7_767)


@pytest.mark.parametrize(("spec_tokens", "mtp_layers", "extra"), [
    (0, 0, 0), (0, 3, 0),            # no speculation: no lookahead
    (1, 1, 0), (1, 3, 0),            # one speculative token reads only the next one
    (3, 1, 0), (7, 1, 0),            # one MTP module: the drafter reads the next token only, whatever S
    (2, 2, 1), (3, 3, 2), (3, 2, 2), (7, 3, 6), (2, 7, 1),  # several modules: S tokens of runway, S - 1 retained
])
def test_the_lookahead_scales_with_the_speculative_tokens_only_for_multi_module_mtp(spec_tokens, mtp_layers, extra) -> None:
    # vLLM: num_prefill_lookahead_tokens = S when min(MTP layers, S) > 1, else 1; windows retain it less one
    assert lookahead_extra_retained(spec_tokens, mtp_layers) == extra


def test_the_cli_retains_lookahead_tokens_by_the_mtp_layer_count(tmp_path: Path) -> None:
    config = write(tmp_path, V41_CONFIG)
    reports = {}
    for layers in ("1", "3"):
        code, out, err = run_cli("--config", str(config), "--max-model-len", "327680", "--pool-bytes", "10GiB",
                                 "--mtp-layers", layers, "--spec-tokens", "3", "--json")
        assert (code, err) == (0, "")
        reports[layers] = json.loads(out)
    assert reports["1"]["extra_retained_tokens"] == 0 and reports["3"]["extra_retained_tokens"] == 2


def test_cli_several_ranks_take_the_minimum(tmp_path: Path) -> None:
    config = write(tmp_path, V41_CONFIG)
    code, out, _ = run_cli("--config", str(config), "--max-model-len", "327680",
                           "--pool-bytes", "10GiB,9.5GiB", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["rank_blocks"] == [46_603, 44_273]
    assert data["num_blocks"] == 44_273


@pytest.mark.parametrize("argv, fragment", [
    (["--pool-bytes", "0"], "not positive"),
    (["--pool-bytes", "10GiB", "--pack", "mla=2"], "more than the stride"),
    (["--pool-bytes", "10GiB", "--pack", "nothing=2"], "unknown group"),
    (["--pool-bytes", "10GiB", "--pack", "mla"], "is not GROUP=k"),
    (["--num-blocks", "-3"], "--num-blocks -3 is below 1"),
])
def test_cli_bad_input_exits_17_with_one_line(tmp_path: Path, argv: list[str], fragment: str) -> None:
    config = write(tmp_path, V41_CONFIG)
    code, out, err = run_cli("--config", str(config), "--max-model-len", "327680", *argv)
    assert code == 17
    assert out == ""
    assert err.startswith("error: ") and fragment in err and err.count("\n") == 1


def test_cli_missing_config_exits_17(tmp_path: Path) -> None:
    code, _, err = run_cli("--config", str(tmp_path / "none.json"), "--max-model-len", "1", "--pool-bytes", "1GiB")
    assert code == 17 and "does not exist" in err


def test_cli_self_test_passes() -> None:
    code, out, _ = run_cli("--self-test")
    assert code == 0
    assert "0 failed" in out and "MISS" not in out


def test_cli_solve_tokens(tmp_path: Path) -> None:
    config = write(tmp_path, V41_CONFIG)
    code, out, _ = run_cli("--config", str(config), "--max-model-len", "327680", "--num-blocks", "46603",
                           "--solve-tokens", "1604926")
    assert code == 0
    assert "no block count N gives this token count" in out
