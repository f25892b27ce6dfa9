"""kv_arith passes every spec option from its command line to the layer specs, and indents its JSON by two."""

from __future__ import annotations

import json

import pytest

from kvbake.errors import KvArithError
from kvbake.kvarith.cli import parse_packing
from kvbake.kvarith.config import load_config
from kvbake.kvarith.report import spec_rows
from kvbake.kvarith.specs import SpecOptions, build_layer_specs
from tests.unit.kvarith_cli import config, run_cli  # noqa: F401  (config is a fixture)


@pytest.mark.parametrize(("argv", "options"), [
    (["--block-size", "64"], SpecOptions(block_size=64)),
    (["--sm100"], SpecOptions(sm100=True)),
    (["--mtp-layers", "2", "--spec-tokens", "7"], SpecOptions(mtp_layers=2, spec_tokens=7)),
    (["--indexer-fp4"], SpecOptions(indexer_fp4=True)),
    (["--indexer-sparse-logits"], SpecOptions(indexer_sparse_logits=True)),
])
def test_each_spec_option_reaches_the_layer_specs(config: str, argv: list[str], options: SpecOptions) -> None:
    code, out, _ = run_cli("--config", config, "--max-model-len", "65536", "--num-blocks", "4000", "--json", *argv)
    assert code == 0
    expected = spec_rows(build_layer_specs(load_config(config), options))
    assert json.loads(out)["specs"] == expected
    assert expected != spec_rows(build_layer_specs(load_config(config), SpecOptions()))


@pytest.mark.parametrize("pool", [["--num-blocks", "4000"], []])
def test_json_output_is_indented_by_two_spaces(config: str, pool: list[str]) -> None:
    code, out, _ = run_cli("--config", config, "--max-model-len", "65536", "--solve-tokens", "1000", "--json", *pool)
    assert code == 0
    assert out == json.dumps(json.loads(out), indent=2) + "\n"


def test_a_pack_value_holding_an_equals_sign_is_refused() -> None:
    with pytest.raises(KvArithError):
        parse_packing(["swa=x=2"])
    assert parse_packing(["swa=2"]) == {"swa": 2}


@pytest.mark.parametrize("sm100", [False, True])
def test_without_sparse_logits_the_indexer_needs_no_stride_alignment(config: str, sm100: bool) -> None:
    specs = build_layer_specs(load_config(config), SpecOptions(sm100=sm100))
    indexers = [spec for spec in specs if spec.role.endswith("_indexer_k")]
    assert indexers and {spec.stride_alignment for spec in indexers} == {1}
