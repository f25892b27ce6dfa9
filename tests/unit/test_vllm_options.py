"""The packaged table of vLLM's serve options: current with the recordings, canonical names by effect, strict loading."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kvbake.errors import IntegrityError
from kvbake.serve.core.vllm_options import (ARITIES, OptionSpec, canonical_name, read_option, serve_options,
                                           table_from_document)

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "scripts"))

from kvbake.launcher.core import launch_plan as launch_vllm_core  # noqa: E402
import vllm_options_table as generator  # noqa: E402

RECORDINGS = generator.read_recordings()
PACKAGED = ROOT / "kvbake" / "data" / "vllm_serve_options.json"


def recorded(spelling: str, dest: str, arity: str = "value", action: str = "store", **extra) -> tuple[str, dict]:
    return spelling, {"dest": dest, "arity": arity, "action": action, **extra}


# ---- the table is what the generator makes of the recordings ----

def test_the_packaged_table_is_what_the_generator_makes_of_the_recordings() -> None:
    table = generator.build_table(RECORDINGS)
    assert PACKAGED.read_text(encoding="utf-8") == generator.table_text(table)
    assert json.loads(generator.table_text(table)) == table


def test_check_says_current_and_writes_nothing(capsys: pytest.CaptureFixture) -> None:
    before = PACKAGED.stat().st_mtime_ns
    assert generator.main(["--check"]) == 0
    assert capsys.readouterr().out == "kvbake/data/vllm_serve_options.json is current\n"
    assert PACKAGED.stat().st_mtime_ns == before


def test_check_fails_on_a_stale_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    stale = tmp_path / "kvbake" / "data" / "vllm_serve_options.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(PACKAGED.read_text(encoding="utf-8").replace('"--seed": ["--seed", "value"]', '"--seed": ["--seed", "flag"]'))
    monkeypatch.setattr(generator, "ROOT", tmp_path)
    monkeypatch.setattr(generator, "TABLE", stale)
    assert generator.main(["--check"]) == 1
    assert "stale: run python scripts/vllm_options_table.py" in capsys.readouterr().out


def test_the_table_joins_both_recordings_and_every_spelling_keeps_its_arity() -> None:
    table = serve_options()
    assert list(RECORDINGS) == ["0.32.0", "0.33.0"] and table.versions == ("0.32.0", "0.33.0")
    spellings = set(RECORDINGS["0.32.0"]) | set(RECORDINGS["0.33.0"])
    assert set(table.options) == spellings
    for spelling in spellings:
        newest = RECORDINGS["0.33.0"].get(spelling) or RECORDINGS["0.32.0"][spelling]
        assert table.spec(spelling).arity == newest["arity"], spelling
    assert json.loads(PACKAGED.read_text())["disagreements"] == []


def test_every_canonical_name_is_a_long_spelling_with_the_same_dest_and_arity() -> None:
    table, newest = serve_options(), {**RECORDINGS["0.32.0"], **RECORDINGS["0.33.0"]}
    for spelling, spec in table.options.items():
        assert spec.canonical.startswith("--") and table.spec(spec.canonical) == OptionSpec(spec.canonical, spec.arity)
        assert newest[spec.canonical]["dest"] == newest[spelling]["dest"], spelling
        assert newest[spec.canonical].get("sets") == newest[spelling].get("sets"), spelling


@pytest.mark.parametrize(("spelling", "canonical", "arity"), [
    ("-tp", "--tensor-parallel-size", "value"), ("-n", "--nnodes", "value"), ("-r", "--node-rank", "value"),
    ("-pp", "--pipeline-parallel-size", "value"), ("-q", "--quantization", "value"), ("-cc", "--compilation-config", "value"),
    ("-dpn", "--data-parallel-rank", "value"), ("-dpr", "--data-parallel-start-rank", "value"),
    ("-ep", "--enable-expert-parallel", "flag"), ("-dpm", "--data-parallel-multi-port-external-lb", "flag"),
    ("-h", "--help", "flag"), ("--device-memory-utilization", "--gpu-memory-utilization", "value"),
    ("--disable-prefix-caching", "--no-enable-prefix-caching", "flag"),
    ("--enable-custom-all-reduce", "--no-disable-custom-all-reduce", "flag"),
    ("--no-enable-prefix-caching", "--no-enable-prefix-caching", "flag"), ("--enable-prefix-caching", "--enable-prefix-caching", "flag"),
    ("--hf-token", "--hf-token", "optional"), ("--served-model-name", "--served-model-name", "one-or-more"),
    ("--max-model-len", "--max-model-len", "value"), ("--config", "--config", "value"),
])
def test_spellings_share_the_canonical_name_of_their_dest_and_effect(spelling: str, canonical: str, arity: str) -> None:
    assert serve_options().spec(spelling) == OptionSpec(canonical, arity)


def test_the_reference_launchers_aliases_agree_with_the_table() -> None:
    for short, long in launch_vllm_core.ALIASES.items():
        assert serve_options().spec(short).canonical == long


def test_every_recorded_arity_is_one_the_parser_reads() -> None:
    assert {spec["arity"] for options in RECORDINGS.values() for spec in options.values()} <= set(ARITIES)


# ---- the generator's rules, on made-up recordings ----

def test_where_recordings_disagree_the_newest_decides_and_the_table_says_so() -> None:
    old = dict([recorded("--keys", "keys"), recorded("--gone", "gone", "flag", "store_true")])
    new = dict([recorded("--keys", "keys", "one-or-more"), recorded("-k", "keys", "one-or-more")])
    table = generator.build_table({"0.9.0": old, "0.10.0": new})
    assert table["recordings"] == ["0.9.0", "0.10.0"]
    assert table["options"] == {"--gone": ["--gone", "flag"], "--keys": ["--keys", "one-or-more"], "-k": ["--keys", "one-or-more"]}
    assert table["disagreements"] == [{"spelling": "--keys", "0.9.0": ["--keys", "value"], "0.10.0": ["--keys", "one-or-more"]}]


def test_recordings_are_ordered_by_version_number(tmp_path: Path) -> None:
    for version in ("0.10.0", "0.9.1"):
        (tmp_path / f"vllm_cli_options_{version}.json").write_text(json.dumps({"vllm_version": version, "options": {}}))
    assert list(generator.read_recordings(tmp_path)) == ["0.9.1", "0.10.0"]


def test_a_boolean_pair_gets_the_spelling_named_after_its_dest() -> None:
    options = dict([recorded("--enable-x", "enable_x", "flag", "enable_disable", sets=True),
                    recorded("--no-enable-x", "enable_x", "flag", "enable_disable", sets=False),
                    recorded("--disable-x", "enable_x", "flag", "enable_disable", sets=False),
                    recorded("-x", "enable_x", "flag", "enable_disable", sets=True)])
    assert generator.canonical_names(options, "9.9.9") == {"--enable-x": "--enable-x", "-x": "--enable-x",
                                                          "--no-enable-x": "--no-enable-x", "--disable-x": "--no-enable-x"}


def test_the_generator_refuses_what_the_parser_could_not_read() -> None:
    with pytest.raises(SystemExit, match="arity 2"):
        generator.version_rows(dict([recorded("--pair", "pair", 2)]), "9.9.9")
    with pytest.raises(SystemExit, match="no canonical long name among --a, --b"):
        generator.canonical_names(dict([recorded("--a", "c"), recorded("--b", "c")]), "9.9.9")


# ---- loading the table ----

@pytest.mark.parametrize(("document", "why"), [
    ([], "not a format-1 document"), ({"format": 2, "options": {}}, "not a format-1 document"),
    ({"format": 1, "options": {"max": ["--max", "value"]}}, "'max' is not an option spelling"),
    ({"format": 1, "options": {"--a": ["--a", "two"]}}, "--a has arity 'two'"),
    ({"format": 1, "options": {"--a": "--a"}}, "--a is not \\[canonical long name, arity\\]"),
    ({"format": 1, "options": {"-a": ["--a", "value"]}}, "-a's canonical name --a is not a spelling of arity value"),
    ({"format": 1, "options": {"--a": ["--a", "flag"], "-a": ["--a", "value"]}}, "-a's canonical name"),
    ({"format": 1, "options": {"--a": ["--a", "flag"]}}, "recordings is not a list"),
])
def test_a_malformed_table_is_refused_in_one_line(document: object, why: str) -> None:
    with pytest.raises(IntegrityError, match=why) as raised:
        table_from_document(document)
    assert raised.value.exit_code == 7 and "\n" not in raised.value.one_line()
    assert "reinstall kvbake" in raised.value.one_line()


@pytest.mark.parametrize(("token", "name", "arity", "inline"), [
    ("--max-model-len", "--max-model-len", "value", None), ("--max_model_len=8", "--max-model-len", "value", "8"),
    ("-tp", "--tensor-parallel-size", "value", None), ("-tp=2", "--tensor-parallel-size", "value", "2"),
    ("-n2", "--nnodes", "value", "2"), ("-r1", "--node-rank", "value", "1"), ("-qfp8", "--quantization", "value", "fp8"),
    ("--compilation-config.level", "--compilation-config.level", "value", None),
    ("--compilation_config.cudagraph_mode=FULL", "--compilation-config.cudagraph_mode", "value", "FULL"),
    ("-cc.level", "-cc.level", None, None), ("--enforce-eager.x", "--enforce-eager.x", None, None),
    ("--spec_remote_url=http://d:8", "--spec-remote-url", None, "http://d:8"), ("-tp2", "-tp2", None, None),
    ("--hf-token=", "--hf-token", "optional", ""),
])
def test_which_option_a_token_names(token: str, name: str, arity: str | None, inline: str | None) -> None:
    option = read_option(token, serve_options())
    assert (option.name, option.arity, option.inline) == (name, arity, inline)


def test_canonical_name_accepts_any_spelling() -> None:
    assert [canonical_name(n) for n in ("-tp", "--max_model_len", "--device-memory-utilization", "--x_y")] == [
        "--tensor-parallel-size", "--max-model-len", "--gpu-memory-utilization", "--x-y"]
