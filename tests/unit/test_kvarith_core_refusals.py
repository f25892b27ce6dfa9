"""kv_arith's core refusals called directly: sizes, mixes, pools, packing, block sizes and settings, each with its fix."""

from __future__ import annotations

import pytest

from kvbake.errors import KvArithError
from kvbake.kvarith.capacity import GIB, ServeSettings, check_settings, compute_capacity, parse_bytes, solve_tokens
from kvbake.kvarith.config import parse_config
from kvbake.kvarith.examples import v4_flash_config, v41_flash_config
from kvbake.kvarith.limits import check_int, shown
from kvbake.kvarith.planner import approximate_gcd, check_packing, plan_layout
from kvbake.kvarith.pressure import PressureInputs, parse_mix, pool_for_test, predict
from kvbake.kvarith.specs import SpecOptions, build_layer_specs
from tests.unit.message_words import says

V41 = parse_config(v41_flash_config())
LAYOUT = plan_layout(build_layer_specs(V41, SpecOptions()))
SETTINGS = ServeSettings(327_680)


def refusal(call, *args, **kwargs) -> KvArithError:
    with pytest.raises(KvArithError) as caught:
        call(*args, **kwargs)
    assert caught.value.exit_code == 17
    return caught.value


@pytest.mark.parametrize(("text", "message", "fix"), [
    ("GiB", "--pool-bytes 'GiB' is not a number", "pass e.g. 10GiB or 10737418240"),
    ("1,5GiB", "--pool-bytes '1,5GiB' has a comma", "write 4.6GiB or 4600MiB; only --pool-bytes lists ranks"),
    ("3 parsecs", "--pool-bytes '3 parsecs' has an unknown unit 'parsecs'", "use B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB or TB"),
    ("1.2.3GiB", "--pool-bytes '1.2.3GiB' is not a number", "pass e.g. 10GiB or 10737418240"),
    ("NaN1", "--pool-bytes 'NaN1' is not finite", "pass e.g. 10GiB"),
    ("Infinity9", "--pool-bytes 'Infinity9' is not a number", "pass e.g. 10GiB"),
    ("-1GiB", "--pool-bytes '-1GiB' is negative", "pass a size of 0 or more, e.g. 10GiB"),
    ("1025TiB", "--pool-bytes '1025TiB' is above the limit of 1 PiB (1,125,899,906,842,624 B)", "pass the per-rank size, e.g. 10GiB"),
])
def test_a_size_that_cannot_be_read_is_refused_naming_the_option(text: str, message: str, fix: str) -> None:
    err = refusal(parse_bytes, text, "--pool-bytes")
    assert says(err.message, message) and says(err.fix, fix)


def test_sizes_read_every_unit_case_and_underscores_and_floor_fractions() -> None:
    assert parse_bytes("1_024 kib") == 1 << 20
    assert parse_bytes("1PiB") == 1 << 50 and parse_bytes("2 TB") == 2 * 10**12 and parse_bytes("3MB") == 3 * 10**6
    assert parse_bytes("1.5B") == 1 and parse_bytes(" 0 ") == 0
    assert says(refusal(parse_bytes, "x").message, "size 'x' is not a number")


def test_only_a_nan_with_digits_reaches_the_finite_check() -> None:
    err = refusal(parse_bytes, "sNaN7", "--mem-floor")
    assert says(err.message, "--mem-floor 'sNaN7' is not finite") and says(err.fix, "pass e.g. 10GiB")
    assert says(refusal(parse_bytes, "Infinity", "--mem-floor").message, "--mem-floor 'Infinity' is not a number")


@pytest.mark.parametrize(("text", "message", "fix"), [
    ("150000x", "--mix entry '150000x' is not LENGTH[xCOUNT]", "write e.g. 150000x3,32000x2"),
    ("abc", "--mix entry 'abc' is not LENGTH[xCOUNT]", "write e.g. 150000x3,32000x2"),
    ("0x3", "--mix entry '0x3' is not positive", "use positive lengths and counts"),
    ("100x0", "--mix entry '100x0' is not positive", "use positive lengths and counts"),
    ("100x1000001", "--mix count 1,000,001 is above the limit 1,000,000", "pass --mix count of at most 1,000,000"),
])
def test_a_mix_entry_that_cannot_be_read_is_named(text: str, message: str, fix: str) -> None:
    err = refusal(parse_mix, text)
    assert says(err.message, message) and says(err.fix, fix)


def test_a_mix_reads_counts_in_either_case_and_underscored_lengths() -> None:
    assert parse_mix("150_000X3, 32000") == ((150_000, 3), (32_000, 1))
    assert parse_mix("7x1000000") == ((7, 1_000_000),)


def test_pressure_inputs_that_cannot_be_used_are_refused() -> None:
    def inputs(**fields) -> PressureInputs:
        return PressureInputs(**({"mix": ((1000, 1),), "chunk_tokens": 2048, "pool_bytes": 10 * GIB} | fields))

    err = refusal(predict, LAYOUT, SETTINGS, inputs(chunk_tokens=0))
    assert says(err.message, "chunk size 0 is not positive") and says(err.fix, "pass --chunk-tokens >= 1")
    err = refusal(predict, LAYOUT, SETTINGS, inputs(output_tokens=-1))
    assert says(err.message, "--output-tokens is negative") and says(err.fix, "pass 0 or more")
    err = refusal(predict, LAYOUT, SETTINGS, inputs(mix=()))
    assert says(err.message, "--pressure needs a request mix") and says(err.fix, "pass --mix LENGTH[xCOUNT],...")
    err = refusal(predict, LAYOUT, SETTINGS, inputs(pool_bytes=2 * 230_400 - 1))
    assert says(err.message, "a pool of 460,799 B holds no usable block") and says(err.fix, "raise the pool or MemAvailable")
    err = refusal(predict, LAYOUT, SETTINGS, inputs(mix=((327_000, 1),), output_tokens=681))
    assert says(err.message, "request of 327,681 tokens exceeds max-model-len") and says(err.fix, "shorten the mix")
    assert predict(LAYOUT, SETTINGS, inputs(mix=((327_000, 1),), output_tokens=680)).requests[0].prompt_tokens == 327_000
    assert predict(LAYOUT, SETTINGS, inputs(pool_bytes=2 * 230_400)).usable_blocks == 1


def test_a_pool_below_the_floor_by_more_than_itself_is_refused() -> None:
    err = refusal(pool_for_test, 1 * GIB, 1 * GIB, 2 * GIB + 1)
    assert says(err.message, "MemAvailable 1,073,741,824 B is 1,073,741,825 B below the floor 2,147,483,649 B")
    assert says(err.fix, "check --mem-available and --mem-floor (both per rank)")
    assert pool_for_test(1 * GIB, 1 * GIB, 2 * GIB - 1) == 1
    err = refusal(pool_for_test, 0, None, 0)
    assert says(err.message, "pool of 0 bytes is not positive") and says(err.fix, "pass the per-rank KV bytes")


def test_capacity_refusals_name_the_option() -> None:
    err = refusal(compute_capacity, LAYOUT, SETTINGS, (), 0)
    assert says(err.message, "--num-blocks 0 is not positive") and says(err.fix, "pass a block count of 1 or more")
    err = refusal(compute_capacity, LAYOUT, SETTINGS)
    assert says(err.message, "no pool given") and says(err.fix, "pass --pool-bytes or --num-blocks")
    err = refusal(compute_capacity, LAYOUT, SETTINGS, (10 * GIB, 0))
    assert says(err.message, "pool of 0 bytes is not positive") and says(err.fix, "pass the per-rank KV bytes, e.g. 10GiB")
    assert compute_capacity(LAYOUT, SETTINGS, (), 1).num_blocks == 1


def test_a_rank_without_room_for_one_block_beside_the_null_block_is_the_refusal() -> None:
    capacity = compute_capacity(LAYOUT, SETTINGS, (10 * GIB, 230_400))
    assert capacity.refusal == "rank 1: no available memory for the cache blocks (230,400 B is at most one block)"
    assert compute_capacity(LAYOUT, SETTINGS, (10 * GIB, 230_401)).refusal.startswith("rank 1: to serve one request")


def test_settings_must_be_positive() -> None:
    err = refusal(check_settings, ServeSettings(0))
    assert says(err.message, "max-model-len 0 is not positive") and says(err.fix, "pass a positive length")
    for settings in (ServeSettings(10, 0), ServeSettings(10, 1, 0)):
        err = refusal(check_settings, settings)
        assert says(err.message, "batched tokens and concurrent batches must be positive") and says(err.fix, "pass values >= 1")
    assert check_settings(ServeSettings(1, 1, 1)) is None


def test_solving_a_negative_count_is_refused() -> None:
    err = refusal(solve_tokens, -1, 3_093, 327_680)
    assert says(err.message, "--solve-tokens -1 is negative") and says(err.fix, "pass the logged token count")
    assert solve_tokens(0, 3_093, 327_680) == ()


def test_packing_refusals_name_the_group_and_the_limit() -> None:
    err = refusal(check_packing, LAYOUT, {"swb": 2})
    assert says(err.message, "unknown group 'swb' in --pack") and says(err.fix, "use one of mla, ring, swa, swa.0, swa.1, swa.2, swa.3")
    err = refusal(check_packing, LAYOUT, {"swa.1": 0})
    assert says(err.message, "packing factor 0 for swa.1 is below 1") and says(err.fix, "pass k >= 1")
    err = refusal(check_packing, LAYOUT, {"ring": 3})
    assert says(err.message, "packing ring by 3 needs 294,912 B per block, more than the stride 230,400 B")
    assert says(err.fix, "use k <= 2 for ring")
    assert check_packing(LAYOUT, {"ring": 2}) == {"ring": 2}
    assert check_packing(LAYOUT, {"swa": 1}) == {"swa.0": 1, "swa.1": 1, "swa.2": 1, "swa.3": 1}


def test_a_layout_of_one_page_size_is_not_covered() -> None:
    from kvbake.kvarith.specs import LayerSpec

    specs = [LayerSpec(f"l{i}", "swa", "MLAAttentionSpec", 64, 576) for i in range(2)]
    err = refusal(plan_layout, specs)
    assert says(err.message, "all layers share one page size") and says(err.fix, "this calculator covers the packed DeepSeek-V4 layouts")


def test_block_size_and_drafter_counts_are_checked() -> None:
    err = refusal(build_layer_specs, V41, SpecOptions(block_size=0))
    assert says(err.message, "block size 0 is not positive") and says(err.fix, "pass a positive --block-size")
    for options in (SpecOptions(mtp_layers=-1), SpecOptions(spec_tokens=-1)):
        err = refusal(build_layer_specs, V41, options)
        assert says(err.message, "--mtp-layers and --spec-tokens must be >= 0") and says(err.fix, "pass a non-negative count")
    assert len(build_layer_specs(parse_config(v4_flash_config()), SpecOptions(block_size=1))) > 0


def test_approximate_gcd_refuses_no_values_and_non_positive_ones() -> None:
    for values in ([], [3, 0]):
        with pytest.raises(ValueError, match="values must be positive and non-empty"):
            approximate_gcd(values)
    assert approximate_gcd([5], 9) == 9 and approximate_gcd([6, 4]) == 2 and approximate_gcd([7, 9], 0) == 1
    assert approximate_gcd([10, 21], 3) == 11 and approximate_gcd([43, 21, 20], 21) == 22


def test_numbers_are_shown_with_separators_or_by_their_digit_count() -> None:
    assert shown(10**24 - 1) == f"{10**24 - 1:,}" and shown(-5) == "-5"
    assert shown(10**24) == "a 25-digit number" and shown(-(10**30)) == "a negative 31-digit number"
    assert shown(1 << 50_000) == "a about 15051-digit number" and shown(-(1 << 50_000)) == "a negative about 15051-digit number"
    err = refusal(check_int, "--x", 0, 1, 5)
    assert says(err.message, "--x 0 is below 1") and says(err.fix, "pass --x between 1 and 5")
    err = refusal(check_int, "--x", 6, 1, 5)
    assert says(err.message, "--x 6 is above the limit 5") and says(err.fix, "pass --x of at most 5")
    assert check_int("--x", 5, 1, 5) == 5 and check_int("--x", 1, 1, 5) == 1
