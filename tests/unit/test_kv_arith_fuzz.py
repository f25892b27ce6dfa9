"""Properties of kv_arith: whatever the command line or config file, exit 0 or a documented code with one line."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbake.errors import KvArithError
from kvbake.kvarith.capacity import UNITS, parse_bytes
from kvbake.kvarith.cli import USAGE_EXIT_CODE, main
from kvbake.kvarith.config import load_config
from kvbake.kvarith.examples import v4_flash_config, v41_flash_config
from kvbake.kvarith.limits import MAX_SIZE_BYTES
from kvbake.kvarith.pressure import deciding_ends, window_span

VALUE_OPTIONS = ("--max-model-len", "--pool-bytes", "--num-blocks", "--block-size", "--max-num-batched-tokens",
                 "--concurrent-batches", "--mtp-layers", "--spec-tokens", "--pack", "--solve-tokens", "--mix",
                 "--chunk-tokens", "--output-tokens", "--mem-available", "--mem-floor")
FLAGS = ("--sm100", "--indexer-fp4", "--indexer-sparse-logits", "--pressure", "--json")
EXIT_CODES = (0, USAGE_EXIT_CODE, KvArithError.exit_code)
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)
numbers = st.one_of(
    st.integers(min_value=-5, max_value=400_000),
    st.integers(min_value=1, max_value=8),
    st.sampled_from([0, 1, 2, 64, 128, 327_680, 2**24, 2**24 + 1, 10**9 + 1, 2**53, 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True),
).map(str)
sizes = st.builds(lambda n, unit: f"{n}{unit}", st.one_of(numbers, st.just("1e999999999"), st.just("nan")),
                  st.sampled_from(["", "GiB", "MiB", " KiB", "TiB", "gb", "parsecs", ",", ",10GiB"]))
packs = st.builds(lambda g, k: f"{g}={k}", st.sampled_from(["swa", "swa.0", "mla", "ring", "", "nope"]), numbers)
mixes = st.lists(st.builds(lambda n, c: f"{n}x{c}", numbers, numbers) | numbers, min_size=1, max_size=3).map(",".join)
odd_text = st.text(max_size=12).filter(lambda s: not s.startswith(("-h", "--h")))
values = st.one_of(numbers, sizes, packs, mixes, odd_text)


def config_files(valid_weight: int = 1) -> st.SearchStrategy[bytes]:
    """Valid configs, valid configs with one field replaced, arbitrary JSON and arbitrary bytes."""
    valid = st.sampled_from([v41_flash_config(), v4_flash_config()])
    mutated = st.builds(lambda c, key, value: {**c, key: value}, valid,
                        st.sampled_from(sorted(v41_flash_config())), json_values)
    as_json = st.one_of(*[valid] * valid_weight, mutated, json_values).map(lambda d: json.dumps(d).encode())
    return st.one_of(as_json, st.binary(max_size=64))


SIZE_OPTIONS = ("--pool-bytes", "--mem-available", "--mem-floor")
fitting_values = {"--pack": packs, "--mix": mixes, **{name: sizes for name in SIZE_OPTIONS}}


@st.composite
def options(draw: st.DrawFn) -> list[str]:
    """One flag, or one option with a value of its own kind (mostly) or of any kind."""
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        return [draw(st.sampled_from(FLAGS))]
    name = draw(st.sampled_from(VALUE_OPTIONS))
    fitting = fitting_values.get(name, numbers)
    return [f"{name}={draw(st.one_of(fitting, fitting, fitting, values))}"]


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """A usable model length and pool, one of them sometimes spoilt or dropped, then up to four more options."""
    length = draw(st.sampled_from(["131072", "327680", "1000"]))
    pool = [f"--pool-bytes={draw(st.sampled_from(['10GiB', '2GiB,1.5GiB', '300MiB']))}"]
    spoil = draw(st.sampled_from(["none"] * 6 + ["length", "pool", "no pool"]))
    if spoil == "length":
        length = draw(numbers)
    elif spoil == "pool":
        pool = [f"--pool-bytes={draw(sizes)}"]
    elif spoil == "no pool":
        pool = []
    argv = [f"--max-model-len={length}", *pool]
    if draw(st.booleans()):
        argv += ["--pressure", f"--mix={draw(st.sampled_from(['1000x3', '100000,500x2']) | mixes)}"]
    for _ in range(draw(st.sampled_from([0, 1, 1, 2, 3, 4]))):
        argv += draw(options())
    return argv


def assert_one_line_or_success(code: int, out: str, err: str) -> None:
    assert code in EXIT_CODES, (code, err)
    if code == 0:
        assert err == ""
    else:
        assert out == ""
        assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
        assert "Traceback" not in err


@FAST
@given(config=config_files(valid_weight=6), argv=command_lines())
def test_command_line_ends_in_a_documented_exit_code(config: bytes, argv: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_bytes(config)
        out, err = io.StringIO(), io.StringIO()
        code = main(["--config", str(path), *argv], out, err)
    assert_one_line_or_success(code, out.getvalue(), err.getvalue())


@settings(max_examples=300, deadline=None)
@given(argv=st.lists(st.sampled_from(VALUE_OPTIONS + FLAGS) | odd_text | values, max_size=8))
def test_arbitrary_argv_never_raises(argv: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out, err)
    assert_one_line_or_success(code, out.getvalue(), err.getvalue())


@settings(max_examples=300, deadline=None)
@given(data=config_files())
def test_any_config_file_is_read_or_refused_in_one_line(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_bytes(data)
        try:
            model = load_config(path)
        except KvArithError as err:
            assert "\n" not in err.one_line()
            assert f"config {path}" in err.one_line()
            return
    assert model.num_hidden_layers >= 1


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(st.text(max_size=30), sizes))
def test_parse_bytes_returns_a_bounded_size_or_refuses(text: str) -> None:
    try:
        value = parse_bytes(text, "--pool-bytes")
    except KvArithError as err:
        assert err.one_line().startswith("--pool-bytes ")
        assert "\n" not in err.one_line()
        return
    assert 0 <= value <= MAX_SIZE_BYTES


@settings(max_examples=300, deadline=None)
@given(count=st.integers(min_value=0, max_value=MAX_SIZE_BYTES), unit=st.sampled_from(sorted(UNITS)))
def test_parse_bytes_reads_whole_counts_of_every_unit(count: int, unit: str) -> None:
    expected = count * UNITS[unit]
    try:
        assert parse_bytes(f"{count}{unit}") == expected
    except KvArithError as err:
        assert expected > MAX_SIZE_BYTES
        assert "above the limit of 1 PiB" in err.one_line()


@settings(max_examples=300, deadline=None)
@given(prompt=st.integers(1, 3000), chunk=st.integers(1, 300), held_extra=st.integers(0, 400),
       block=st.sampled_from([1, 2, 3, 32, 64, 96, 128]))
def test_deciding_ends_find_the_same_widest_span_as_every_boundary(prompt: int, chunk: int, held_extra: int,
                                                                   block: int) -> None:
    held = held_extra + chunk
    every = list(range(chunk, prompt, chunk)) + [prompt]
    widest = max(window_span(end, min(held, end), block) for end in every)
    assert max(window_span(end, min(held, end), block) for end in deciding_ends(prompt, chunk, held, block)) == widest
