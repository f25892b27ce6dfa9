"""kv_arith refuses every bad option value and config file with exit 17 and one line, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.errors import KvArithError
from tests.unit.kvarith_cli import config, run_cli  # noqa: F401  (config is a fixture)
from kvbake.kvarith.config import load_config
from kvbake.kvarith.examples import v4_flash_config, v41_flash_config
from kvbake.kvarith.limits import INT_OPTIONS, MAX_SIZE_BYTES

HUGE = str(10**400)




def refused(code: int, out: str, err: str, fragment: str, exit_code: int = 17) -> bool:
    """One line on stderr naming `fragment`, nothing on stdout, the documented exit code."""
    assert (code, out) == (exit_code, ""), err
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert fragment in err, err
    return True


def run_v41(config: str, *argv: str) -> tuple[int, str, str]:
    return run_cli("--config", config, "--max-model-len", "327680", *argv)


@pytest.mark.parametrize("size", ["1e400", "1e999999999GiB", "1025TiB", HUGE])
def test_pool_bytes_above_one_pib_is_refused(config: str, size: str) -> None:
    assert refused(*run_v41(config, "--pool-bytes", size), f"--pool-bytes {size!r} is above the limit of 1 PiB")


@pytest.mark.parametrize("option", ["--num-blocks", "--solve-tokens"])
def test_huge_integer_options_are_refused_with_the_limit(config: str, option: str) -> None:
    bound = next(b for b in INT_OPTIONS if b.option == option)
    pool = () if option == "--num-blocks" else ("--pool-bytes", "10GiB")
    code, out, err = run_v41(config, *pool, option, HUGE)
    assert refused(code, out, err, f"{option} a 401-digit number is above the limit {bound.high:,}")


@pytest.mark.parametrize("bound", INT_OPTIONS, ids=lambda b: b.option)
def test_every_integer_option_is_refused_above_its_limit(config: str, bound) -> None:
    extra = ("--pressure", "--mix", "1000") if bound.option in ("--chunk-tokens", "--output-tokens") else ()
    pool = () if bound.option == "--num-blocks" else ("--pool-bytes", "10GiB")
    code, out, err = run_v41(config, *pool, *extra, bound.option, str(bound.high + 1))
    assert refused(code, out, err, f"{bound.option} {bound.high + 1:,} is above the limit {bound.high:,}")


@pytest.mark.parametrize("bound", INT_OPTIONS, ids=lambda b: b.option)
def test_every_integer_option_is_refused_below_its_lowest_value(config: str, bound) -> None:
    extra = ("--pressure", "--mix", "1000") if bound.option in ("--chunk-tokens", "--output-tokens") else ()
    pool = () if bound.option == "--num-blocks" else ("--pool-bytes", "10GiB")
    code, out, err = run_v41(config, *pool, *extra, bound.option, str(bound.low - 1))
    assert refused(code, out, err, f"{bound.option} {bound.low - 1} is below {bound.low}")


def test_block_size_zero_is_refused_not_replaced_by_the_default(config: str) -> None:
    assert refused(*run_v41(config, "--pool-bytes", "10GiB", "--block-size", "0"), "--block-size 0 is below 1")


def test_chunk_tokens_zero_is_refused_not_replaced_by_the_default(config: str) -> None:
    code, out, err = run_v41(config, "--pool-bytes", "10GiB", "--pressure", "--mix", "1000", "--chunk-tokens", "0")
    assert refused(code, out, err, "--chunk-tokens 0 is below 1")


def test_solve_tokens_needs_no_pool(config: str) -> None:
    code, out, err = run_v41(config, "--solve-tokens", "4937236")
    assert (code, err) == (0, "")
    assert "R (blocks per request): 3,093" in out
    assert "Solve 4,937,236: N = 46,603 (pool 10,737,331,200..10,737,561,599 B)" in out


def test_solve_tokens_without_pool_as_json(config: str) -> None:
    code, out, _ = run_v41(config, "--solve-tokens", "1604926", "--json")
    data = json.loads(out)
    assert code == 0
    assert (data["stride"], data["blocks_per_request"]) == (230_400, 3_093)
    assert data["solve_tokens"] == {"target": 1_604_926, "num_blocks": [], "pool_bytes_ranges": []}


def test_no_pool_and_no_solve_is_refused(config: str) -> None:
    assert refused(*run_v41(config), "no pool given")


def test_pressure_needs_a_pool_even_with_solve_tokens(config: str) -> None:
    code, out, err = run_v41(config, "--solve-tokens", "5", "--pressure", "--mix", "1000")
    assert refused(code, out, err, "--pressure needs a pool")


@pytest.mark.parametrize("size, fragment", [
    ("nan", "--pool-bytes 'nan' is not a number"),
    ("inf", "--pool-bytes 'inf' is not a number"),
    ("-inf", "--pool-bytes '-inf' is not a number"),
    ("sNaN1", "--pool-bytes 'sNaN1' is not finite"),
    ("", "--pool-bytes '' is not a number"),
    ("GiB", "--pool-bytes 'GiB' is not a number"),
    ("-1GiB", "--pool-bytes '-1GiB' is negative"),
    ("1 0GiB", "--pool-bytes '1 0GiB' is not a number"),
    ("3 parsecs", "has an unknown unit 'parsecs'"),
])
def test_bad_pool_sizes(config: str, size: str, fragment: str) -> None:
    assert refused(*run_v41(config, f"--pool-bytes={size}"), fragment)


def test_trailing_comma_in_pool_bytes_names_the_empty_rank(config: str) -> None:
    assert refused(*run_v41(config, "--pool-bytes", "10GiB,"), "--pool-bytes '' is not a number")


@pytest.mark.parametrize("argv, fragment", [
    (["--pack", "swa=2", "--pack", "swa=3"], "--pack names 'swa' twice"),
    (["--pack", "=2"], "--pack '=2' is not GROUP=k"),
    (["--pack", ""], "--pack '' is not GROUP=k"),
    (["--pack", "swa=0"], "--pack 'swa=0' is not GROUP=k"),
    (["--pack", "swa=two"], "--pack 'swa=two' is not GROUP=k"),
    (["--pack", f"swa={HUGE}"], "--pack swa a 401-digit number is above the limit 65,536"),
])
def test_pack_oddities(config: str, argv: list[str], fragment: str) -> None:
    assert refused(*run_v41(config, "--pool-bytes", "10GiB", *argv), fragment)


@pytest.mark.parametrize("mix, fragment", [
    ("150000x", "--mix entry '150000x' is not LENGTH[xCOUNT]"),
    ("", "--mix entry '' is not LENGTH[xCOUNT]"),
    ("x3", "--mix entry 'x3' is not LENGTH[xCOUNT]"),
    ("1000,", "--mix entry '' is not LENGTH[xCOUNT]"),
    ("0x1", "--mix entry '0x1' is not positive"),
    ("1000x-2", "--mix entry '1000x-2' is not positive"),
    ("1000x1000001", "--mix count 1,000,001 is above the limit 1,000,000"),
    ("400000", "request of 400,000 tokens exceeds max-model-len"),
])
def test_mix_oddities(config: str, mix: str, fragment: str) -> None:
    assert refused(*run_v41(config, "--pool-bytes", "10GiB", "--pressure", "--mix", mix), fragment)


@pytest.mark.parametrize("option, value", [
    ("--mix", "1000"), ("--chunk-tokens", "2048"), ("--mem-available", "4GiB"), ("--output-tokens", "5"),
])
def test_pressure_options_without_pressure_are_refused(config: str, option: str, value: str) -> None:
    assert refused(*run_v41(config, "--pool-bytes", "10GiB", option, value), f"{option} is used only with --pressure")


def test_pressure_without_mix_is_refused(config: str) -> None:
    assert refused(*run_v41(config, "--pool-bytes", "10GiB", "--pressure"), "--pressure needs a request mix")


@pytest.mark.parametrize("argv, fragment", [
    (["--mem-floor", "1GiB"], "--mem-floor is used only with --mem-available"),
    (["--mem-available", ""], "--mem-available '' is not a number"),
    (["--mem-available", "4GiB", "--mem-floor", ""], "--mem-floor '' is not a number"),
    (["--mem-available", "4,6GiB"], "--mem-available '4,6GiB' has a comma"),
    (["--mem-available=-1GiB"], "--mem-available '-1GiB' is negative"),
    (["--mem-available", "nan"], "--mem-available 'nan' is not a number"),
    (["--mem-available", "0", "--mem-floor", "20GiB"], "below the floor 21,474,836,480 B"),
])
def test_mem_available_and_floor_oddities(config: str, argv: list[str], fragment: str) -> None:
    code, out, err = run_v41(config, "--pool-bytes", "10GiB", "--pressure", "--mix", "1000", *argv)
    assert refused(code, out, err, fragment)


def test_mem_floor_is_applied(config: str) -> None:
    code, out, _ = run_v41(config, "--pool-bytes", "10GiB", "--pressure", "--mix", "1000", "--json",
                           "--mem-available", "4GiB", "--mem-floor", "1GiB")
    assert code == 0
    assert json.loads(out)["pressure"]["pool_for_test"] == 13 << 30


def test_empty_config_path_is_refused() -> None:
    assert refused(*run_cli("--config", "", "--max-model-len", "1", "--pool-bytes", "1GiB"), "--config is empty")


@pytest.mark.parametrize("argv, fragment", [
    (["--max-model-len", "abc"], "argument --max-model-len: invalid int value: 'abc'"),
    (["--max-model-len", "1" * 5000], "argument --max-model-len: invalid int value"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--mix"], "argument --mix: expected one argument"),
    (["--pool-bytes", "1GiB", "--num-blocks", "3"], "not allowed with argument"),
])
def test_usage_errors_exit_2_with_one_line(argv: list[str], fragment: str) -> None:
    assert refused(*run_cli(*argv), fragment, exit_code=2)


def write_bytes(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "config.json"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("data, fragment", [
    (b"\xff\xfe{}", "is not UTF-8 text (byte 0: invalid start byte)"),
    (b"{\"model_type\": \"deepseek_v41\", \"x\": \"\xe9\"}", "is not UTF-8 text (byte 37: invalid continuation byte)"),
    (b"{not json", "is not JSON (line 1"),
    (b"", "is not JSON (line 1"),
    (b"[1, 2]", "config is not a JSON object"),
    (b"\"text\"", "config is not a JSON object"),
    (b"[" * 100_000 + b"]" * 100_000, "is not usable JSON (RecursionError)"),
    (b"{\"n\": " + b"7" * 5000 + b"}", "is not usable JSON (ValueError)"),
])
def test_bad_config_file_names_the_file(tmp_path: Path, data: bytes, fragment: str) -> None:
    path = write_bytes(tmp_path, data)
    code, out, err = run_cli("--config", str(path), "--max-model-len", "1000", "--pool-bytes", "1GiB")
    assert refused(code, out, err, fragment)
    assert f"config {path}" in err


def test_config_that_is_a_directory(tmp_path: Path) -> None:
    code, out, err = run_cli("--config", str(tmp_path), "--max-model-len", "1000", "--pool-bytes", "1GiB")
    assert refused(code, out, err, f"config {tmp_path} is a directory; fix: pass the config.json file inside it")


def test_config_that_is_not_a_regular_file() -> None:
    with pytest.raises(KvArithError) as info:
        load_config("/dev/null")
    assert info.value.exit_code == 17
    assert "/dev/null" in info.value.message and "not a regular file" in info.value.message
    assert "--config" in info.value.fix


def test_config_path_with_a_nul_byte() -> None:
    with pytest.raises(KvArithError) as info:
        load_config("conf\x00ig.json")
    assert info.value.exit_code == 17
    assert repr("conf\x00ig.json") in info.value.message and "embedded null byte" in info.value.message
    assert "--config" in info.value.fix


def test_missing_config_names_the_file_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "absent.json"
    code, out, err = run_cli("--config", str(path), "--max-model-len", "1000", "--pool-bytes", "1GiB")
    assert refused(code, out, err, f"config {path} does not exist; fix: pass the model's config.json")


def test_config_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = write_bytes(tmp_path, b"\xef\xbb\xbf" + json.dumps(v41_flash_config()).encode())
    code, out, err = run_cli("--config", str(path), "--max-model-len", "327680", "--pool-bytes", "10GiB")
    assert (code, err) == (0, "")


@pytest.mark.parametrize("field, value, fragment", [
    ("index_head_dim", 10**400, "field 'index_head_dim' a 401-digit number is above the limit 4,294,967,296"),
    ("sliding_window", 2**33, "field 'sliding_window' 8,589,934,592 is above the limit"),
    ("num_hidden_layers", 5000, "field 'num_hidden_layers' 5,000 is above the limit 4,096"),
    ("max_position_embeddings", float("nan"), "field 'max_position_embeddings' is nan, not a positive integer"),
    ("head_dim", "x" * 500, "field 'head_dim' is 'xxxxxxxx"),
])
def test_config_numbers_out_of_range_name_the_file_and_field(tmp_path: Path, field: str, value, fragment: str) -> None:
    path = write_bytes(tmp_path, json.dumps({**v4_flash_config(), field: value}).encode())
    code, out, err = run_cli("--config", str(path), "--max-model-len", "1000", "--pool-bytes", "1GiB")
    assert refused(code, out, err, fragment)
    assert f"config {path}: " in err


def test_pool_limit_is_accepted_and_one_byte_more_is_not(config: str) -> None:
    code, _, err = run_v41(config, "--pool-bytes", str(MAX_SIZE_BYTES))
    assert (code, err) == (0, "")
    assert refused(*run_v41(config, "--pool-bytes", str(MAX_SIZE_BYTES + 1)), "is above the limit of 1 PiB")
