"""The command lines of serving vLLM processes: which argv is a serve and in which form, its exact arguments, refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbake.errors import IntegrityError
from kvbake.serve.core.python_argv import interpreter_target, is_interpreter
from kvbake.serve.core.vllm_argv import (API_SERVER, API_SERVER_MODULE, CLI_MAIN, CLI_MAIN_MODULE, MODEL_OPTION,
                                        PER_NODE_OPTIONS, REFUSED_OPTIONS, SERVE_SCRIPT, ServeArgs, ServeEntry,
                                        ServeProcess, parse_serve_args, parse_serve_process, serve_entry)
from kvbake.serve.core.vllm_options import render_entries, serve_options

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "scripts"))

from kvbake.launcher.core import launch_plan as launch_vllm_core  # noqa: E402
import record_vllm_cli as recorder  # noqa: E402

MODEL = "/models/served"
VLLM = "/usr/local/bin/vllm"
HF_TOKEN = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7"
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)


def args_of(*tokens: str, form: str = SERVE_SCRIPT) -> ServeArgs:
    return parse_serve_args(list(tokens), form)


def refusal(tokens: list[str], form: str = SERVE_SCRIPT) -> str:
    """The one line a refused command line gets; it is an IntegrityError (exit 7) with a fix."""
    with pytest.raises(IntegrityError) as raised:
        parse_serve_args(tokens, form)
    line = raised.value.one_line()
    assert raised.value.exit_code == 7 and "\n" not in line and "; fix: " in line
    return line


def round_trips(args: ServeArgs, form: str = SERVE_SCRIPT) -> None:
    assert parse_serve_args(args.argv(), form) == args


# ---- recognising a serve ----

@pytest.mark.parametrize(("argv", "prefix"), [
    ([VLLM, "serve", MODEL], [VLLM, "serve"]),
    (["vllm", "serve", MODEL], ["vllm", "serve"]),
    (["/opt/standin/bin/vllm", "serve", MODEL], ["/opt/standin/bin/vllm", "serve"]),
    (["python3", VLLM, "serve", MODEL], ["python3", VLLM, "serve"]),
    (["/usr/bin/python3.12", "-u", VLLM, "serve", MODEL], ["/usr/bin/python3.12", "-u", VLLM, "serve"]),
    (["python", "-O", "-OO", "-B", "-E", "-I", "-s", "-S", "-P", VLLM, "serve", MODEL],
     ["python", "-O", "-OO", "-B", "-E", "-I", "-s", "-S", "-P", VLLM, "serve"]),
    (["python3", "-X", "dev", "-Xfrozen_modules=off", "-X=utf8", "-W", "ignore", "-Wdefault", VLLM, "serve", MODEL],
     ["python3", "-X", "dev", "-Xfrozen_modules=off", "-X=utf8", "-W", "ignore", "-Wdefault", VLLM, "serve"]),
    (["python3", "-uB", "--check-hash-based-pycs", "never", "--", VLLM, "serve", MODEL],
     ["python3", "-uB", "--check-hash-based-pycs", "never", "--", VLLM, "serve"]),
    (["python3", "-uXdev", "/opt/venv/bin/vllm", "serve", MODEL], ["python3", "-uXdev", "/opt/venv/bin/vllm", "serve"]),
])
def test_the_console_script_is_a_serve_wherever_it_lives_and_whatever_runs_it(argv: list[str], prefix: list[str]) -> None:
    assert serve_entry(argv) == ServeEntry(SERVE_SCRIPT, tuple(prefix))
    process = parse_serve_process(argv)
    assert process == ServeProcess(SERVE_SCRIPT, tuple(prefix), ServeArgs(MODEL, MODEL, ()))
    assert process.model == MODEL and process.argv() == argv


@pytest.mark.parametrize(("argv", "form", "prefix"), [
    (["python3", "-m", API_SERVER_MODULE, "--model", MODEL], API_SERVER, ["python3", "-m", API_SERVER_MODULE]),
    (["/usr/bin/python3", "-u", f"-m{API_SERVER_MODULE}", "--model", MODEL], API_SERVER, ["/usr/bin/python3", "-u", f"-m{API_SERVER_MODULE}"]),
    (["python3", "-um", API_SERVER_MODULE, "--model", MODEL], API_SERVER, ["python3", "-um", API_SERVER_MODULE]),
    (["python3", "-m", CLI_MAIN_MODULE, "serve", MODEL], CLI_MAIN, ["python3", "-m", CLI_MAIN_MODULE, "serve"]),
    (["python3.12", "-X", "dev", "-m", CLI_MAIN_MODULE, "serve", MODEL], CLI_MAIN, ["python3.12", "-X", "dev", "-m", CLI_MAIN_MODULE, "serve"]),
])
def test_the_modules_behind_the_serve_are_serves(argv: list[str], form: str, prefix: list[str]) -> None:
    process = parse_serve_process(argv)
    assert (process.form, process.prefix, process.model) == (form, tuple(prefix), MODEL)
    assert process.argv() == argv


@pytest.mark.parametrize("argv", [
    [], [""], ["bash", "-c", f"eval $(cat /root/.bashrc) && vllm serve {MODEL} >> /proc/1/fd/1"],
    ["/bin/sh", "-c", f"exec vllm serve {MODEL}"], ["bash", "/serve.sh"], ["/bin/bash"],
    ["ray", "start", "--block", "--head", "--port=6379"], ["/usr/bin/python3", "/usr/local/bin/ray", "start", "--block"],
    ["sleep", "infinity"], ["tini", "--", "vllm", "serve", MODEL],
    ["vllm"], ["vllm", "bench", "serve", "--model", MODEL], ["vllm", "chat"], ["vllm", "--version"], ["vllm", "-v"],
    ["python3", VLLM, "bench", "throughput"], ["python3", VLLM], ["python3", "-m", CLI_MAIN_MODULE, "bench", "serve"],
    ["python3", "-m", CLI_MAIN_MODULE], ["ray::RayWorkerWrapper.execute_method"], ["ray::IDLE"],
    ["ray::RayWorkerWrapper"], ["python3", "-m", "vllm.entrypoints.openai.run_batch", "-i", "in.jsonl", "--model", MODEL],
    ["python3", "-c", "import vllm; vllm.serve()"], ["python3", "-c", "import runpy", VLLM, "serve", MODEL],
    ["python3", "-uc", "print(1)"], ["python3"], ["python3", "-"], ["python3", "--version"], ["python3", "-V"],
    ["python3", "-h"], ["python3", "-m"], ["python3", "-X"],
    ["python3", "serve.py", MODEL], ["python3", "--"], ["/usr/local/bin/vllm-serve", MODEL], ["vllm.sh", "serve"],
    ["pythonista", VLLM, "serve", MODEL], ["python3-config", VLLM, "serve"],
])
def test_anything_else_is_no_serve(argv: list[str]) -> None:
    assert serve_entry(argv) is None and parse_serve_process(argv) is None


def test_interpreter_names_and_targets() -> None:
    assert all(is_interpreter(name) for name in ("python", "python3", "python3.12", "/usr/bin/python3.11", "python2"))
    assert not any(is_interpreter(name) for name in ("pythonw.exe", "ipython", "python3-config", "py"))
    assert interpreter_target(["python3", "-Wignore", "x.py", "-m", "y"]) == (2, None)
    assert interpreter_target(["python3", "-W", "ignore", "-m", "mod", "a"]) == (5, "mod")
    assert interpreter_target(["python3", "-OOm", "mod"]) == (3, "mod")


def test_a_serve_kvbake_cannot_read_is_refused_not_taken_for_another_process() -> None:
    with pytest.raises(IntegrityError, match="vllm serve: --config"):
        parse_serve_process([VLLM, "serve", MODEL, "--config", "/etc/vllm.yaml"])


# ---- parsing the arguments ----

def test_flags_values_and_lists_keep_their_order_and_canonical_names() -> None:
    args = args_of(MODEL, "--max-model-len", "163840", "--enable-prompt-tokens-details", "--no-enable-prefix-caching",
                   "-tp=2", "--served-model-name", "dsv41", "deepseek", "--max_num_seqs=8", "--kv-cache-dtype", "fp8")
    assert args.entries == (("--max-model-len", ("163840",)), ("--enable-prompt-tokens-details", ()),
                            ("--no-enable-prefix-caching", ()), ("--tensor-parallel-size", ("2",)),
                            ("--served-model-name", ("dsv41", "deepseek")), ("--max-num-seqs", ("8",)),
                            ("--kv-cache-dtype", ("fp8",)))
    assert args.argv() == [MODEL, "--max-model-len", "163840", "--enable-prompt-tokens-details", "--no-enable-prefix-caching",
                           "--tensor-parallel-size", "2", "--served-model-name", "dsv41", "deepseek", "--max-num-seqs", "8",
                           "--kv-cache-dtype", "fp8"]
    assert args.value("--max-model-len") == "163840" and args.value("-tp") == "2" and args.value("--max_num_seqs") == "8"
    assert args.values("--served-model-name") == ("dsv41", "deepseek") and args.values("--port") is None
    assert args.value("--port") is None and args.given("--enable-prompt-tokens-details") and args.unknown == ()
    assert args.value("--enable-prompt-tokens-details") is None and args_of(MODEL, "--hf-token").value("--hf-token") is None
    with pytest.raises(ValueError, match="--served-model-name is given 2 values, not one"):
        args.value("--served-model-name")


def test_equivalent_spellings_read_the_same() -> None:
    plain = args_of(MODEL, "--gpu-memory-utilization", "0.9", "--no-enable-prefix-caching", "--nnodes", "2")
    assert args_of(MODEL, "--device_memory_utilization=0.9", "--disable-prefix-caching", "-n2") == plain
    assert args_of(MODEL, "--gpu_memory_utilization", "0.9", "--no_enable_prefix_caching", "-n", "2") == plain


def test_negative_numbers_are_values() -> None:
    args = args_of(MODEL, "--seed", "-1", "--max-logprobs=-1", "--cudagraph-capture-sizes", "-1", "-2.5", "-.5", "--port", "8000")
    assert args.entries == (("--seed", ("-1",)), ("--max-logprobs", ("-1",)),
                            ("--cudagraph-capture-sizes", ("-1", "-2.5", "-.5")), ("--port", ("8000",)))
    round_trips(args)


def test_dotted_keys_of_an_option_are_options_of_their_own() -> None:
    args = args_of(MODEL, "--compilation-config.level", "3", "--compilation_config.cudagraph_mode=FULL_DECODE_ONLY",
                   "--compilation-config.pass_config.fuse_norm_quant", "true", "--compilation-config.cudagraph_capture_sizes+", "8")
    assert [name for name, _ in args.entries] == ["--compilation-config.level", "--compilation-config.cudagraph_mode",
                                                  "--compilation-config.pass_config.fuse_norm_quant",
                                                  "--compilation-config.cudagraph_capture_sizes+"]
    assert args.value("--compilation-config.level") == "3" and args.unknown == ()
    assert args.without(["--compilation-config"]).entries == ()
    round_trips(args)


def test_a_dotted_key_of_a_flag_or_a_short_option_is_unknown() -> None:
    args = args_of(MODEL, "--enforce-eager.x", "1", "-cc.level", "3")
    assert args.entries == (("--enforce-eager.x", ("1",)), ("-cc.level", ("3",)))
    assert args.unknown == ("--enforce-eager.x", "-cc.level")


def test_the_optional_token_option_takes_a_value_only_when_one_follows() -> None:
    assert args_of(MODEL, "--hf-token").entries == (("--hf-token", ()),)
    assert args_of(MODEL, "--hf-token", "--port", "8000").entries == (("--hf-token", ()), ("--port", ("8000",)))
    assert args_of("--hf-token", "token-1", "--model", MODEL).entries == (("--hf-token", ("token-1",)), ("--model", (MODEL,)))
    assert args_of(MODEL, "--hf-token=").entries == (("--hf-token", ("",)),)


def test_one_or_more_takes_every_token_up_to_the_next_option_so_a_model_after_it_is_a_name() -> None:
    args = args_of("--served-model-name", "a", MODEL, "--model", "m")
    assert args.values("--served-model-name") == ("a", MODEL) and args.model == "m" and args.positional is None
    assert args_of("--served-model-name=a", MODEL).positional == MODEL


def test_double_dash_ends_the_options() -> None:
    args = args_of("--served-model-name", "a", "--", MODEL)
    assert (args.model, args.positional, args.entries) == (MODEL, MODEL, (("--served-model-name", ("a",)),))
    odd = args_of("--port", "8000", "--", "-odd-model")
    assert odd.model == "-odd-model" and odd.argv() == ["--port", "8000", "--", "-odd-model"]
    round_trips(odd)


def test_repeated_options_are_kept_and_the_last_is_the_value() -> None:
    args = args_of(MODEL, "--port", "8000", "--middleware", "a.B", "--port=9000", "--middleware", "c.D")
    assert args.entries == (("--port", ("8000",)), ("--middleware", ("a.B",)), ("--port", ("9000",)), ("--middleware", ("c.D",)))
    assert args.value("--port") == "9000" and args.all_values("--middleware") == (("a.B",), ("c.D",))


def test_a_token_with_a_space_that_names_no_option_is_a_value() -> None:
    args = args_of("--chat-template", "-x y", MODEL)
    assert args.entries == (("--chat-template", ("-x y",)),) and args.model == MODEL


@pytest.mark.parametrize(("tokens", "source"), [
    ([MODEL, "--port", "8000"], "positional"), (["--port", "8000", MODEL], "positional"),
    (["--model", MODEL], "--model"), (["--model=" + MODEL], "--model"), ([MODEL, "--model", MODEL], "both"),
])
def test_the_model_is_the_positional_or_model_or_both_agreeing(tokens: list[str], source: str) -> None:
    args = args_of(*tokens)
    assert args.model == MODEL and args.model_source == source
    round_trips(args)


def test_the_api_server_serves_model() -> None:
    args = args_of("--model", MODEL, "--port", "8000", form=API_SERVER)
    assert (args.model, args.positional, args.model_source) == (MODEL, None, "--model")
    round_trips(args, API_SERVER)


@pytest.mark.parametrize("tokens", [
    [MODEL, "--=x"], [MODEL, "-=x"], [MODEL, "--max-model-len=--"], [MODEL, "--served-model-name=-x"], [MODEL, "--port=-n 5"],
    ["--", "-odd"], ["--port", "1", "--", "-1"], ["--", "-n 5"], ["--", "-x y"], ["--", "--"], [MODEL, "--hf-token="],
    [MODEL, "--spec-x="], ["--spec-x", "--", "-m"], [MODEL, "--spec-x=-y"], [MODEL, "-tp="], [MODEL, "-n2=3"],
    [MODEL, "--compilation-config.=3"], [MODEL, "--.x", "1"], ["--model=-m"], [MODEL, "--chat-template", "-x y"],
])
def test_odd_but_accepted_command_lines_round_trip(tokens: list[str]) -> None:
    round_trips(args_of(*tokens))


# ---- options kvbake does not know ----

def test_unknown_options_are_kept_with_a_following_value_and_listed() -> None:
    args = args_of(MODEL, "--spec-remote-url", "http://10.0.0.13:8001", "--spec_remote_max_positions=4096",
                   "--some-flag", "--port", "8000", "--spec-remote-url", "http://10.0.0.14:8001", "-x")
    assert args.entries == (("--spec-remote-url", ("http://10.0.0.13:8001",)), ("--spec-remote-max-positions", ("4096",)),
                            ("--some-flag", ()), ("--port", ("8000",)), ("--spec-remote-url", ("http://10.0.0.14:8001",)),
                            ("-x", ()))
    assert args.unknown == ("--spec-remote-url", "--spec-remote-max-positions", "--some-flag", "-x")
    assert args.argv()[:6] == [MODEL, "--spec-remote-url", "http://10.0.0.13:8001", "--spec-remote-max-positions", "4096",
                               "--some-flag"]
    round_trips(args)


def test_an_unknown_option_before_the_model_takes_it_as_its_value() -> None:
    assert "names no model" in refusal(["--some-flag", MODEL])


# ---- refusals ----

@pytest.mark.parametrize(("tokens", "says"), [
    ([MODEL, "--config", "/etc/vllm.yaml"], "vllm serve: --config reads further arguments from a file"),
    ([MODEL, "--config=/etc/vllm.yaml"], "--config reads further arguments from a file"),
    (["--config", "/etc/vllm.yaml"], "--config reads further arguments"),
    ([MODEL, "--help"], "vllm serve: --help prints the help and exits; it serves nothing; fix: remove --help"),
    ([MODEL, "-h"], "vllm serve: -h prints the help and exits; it serves nothing; fix: remove -h"),
    ([MODEL, "--version"], "--version prints the version and exits"),
    ([MODEL, "--max-model-len"], "vllm serve: --max-model-len takes a value but ends the command line; fix: give --max-model-len its value"),
    ([MODEL, "-tp", "--port", "8000"], "-tp takes a value but is followed by the option --port; fix: give --tensor-parallel-size"),
    ([MODEL, "--max-model-len", "--port=8000"], "followed by the option --port;"),
    ([MODEL, "--max-model-len", "--"], "followed by the option --;"),
    ([MODEL, "--served-model-name"], "--served-model-name takes a value but ends the command line"),
    ([MODEL, "--enforce-eager=true"], "vllm serve: --enforce-eager is a flag but is given the value 'true'; fix: give --enforce-eager without a value"),
    (["--port", "8000"], "vllm serve names no model (neither a positional model nor --model)"),
    ([], "vllm serve names no model"),
    ([MODEL, "--model", "/models/other"], "vllm serve names two models, '/models/served' and '/models/other'"),
    (["--model", MODEL, "--model", "/models/other"], "names two models"),
    ([MODEL, "/models/other"], "vllm serve: unexpected argument '/models/other' after the model '/models/served'"),
    (["--port", "8000", "--", MODEL, "x"], "unexpected argument 'x'"),
    ([""], "vllm serve names an empty model"), (["--model="], "names an empty model"),
])
def test_command_lines_kvbake_cannot_read_honestly_are_refused(tokens: list[str], says: str) -> None:
    assert says in refusal(tokens)


@pytest.mark.parametrize(("tokens", "says"), [
    ([MODEL, "--port", "8000"], f"python3 -m {API_SERVER_MODULE} ignores the positional argument '/models/served' and serves --model's model"),
    (["--model", MODEL, MODEL], "ignores the positional argument"),
    (["--port", "8000"], f"python3 -m {API_SERVER_MODULE} names no model"),
])
def test_the_api_server_ignores_a_positional_model_so_kvbake_refuses_one(tokens: list[str], says: str) -> None:
    assert says in refusal(tokens, API_SERVER)


def test_the_worker_entry_names_itself_in_refusals() -> None:
    assert f"python3 -m {CLI_MAIN_MODULE} serve: --help" in refusal([MODEL, "--help"], CLI_MAIN)


def test_refusals_withhold_what_looks_like_a_credential() -> None:
    line = refusal([MODEL, HF_TOKEN])
    assert HF_TOKEN not in line and "(withheld: it looked like a Hugging Face token)" in line
    assert HF_TOKEN not in refusal([MODEL, "--enforce-eager=" + HF_TOKEN])


def test_every_refused_option_is_an_option_of_vllm_or_the_version_query() -> None:
    assert {name for name in REFUSED_OPTIONS if serve_options().spec(name)} == {"--config", "--help"}


# ---- per-node options ----

def test_the_per_node_options_are_canonical_names_of_the_table() -> None:
    table = serve_options()
    assert all(table.spec(name) and table.spec(name).canonical == name for name in PER_NODE_OPTIONS)
    assert set(launch_vllm_core.PER_NODE) - {MODEL_OPTION} <= set(PER_NODE_OPTIONS)


def test_split_separates_what_differs_per_rank_from_what_every_rank_shares() -> None:
    args = args_of(MODEL, "--max-model-len", "163840", "-n", "2", "--tensor-parallel-size", "2", "-r", "1",
                   "--master-addr", "10.0.0.11", "--master-port=29501", "--headless", "-dpn", "1", "--data-parallel-address",
                   "10.0.0.11", "-dpp", "13345", "-dpr", "1", "-dpl", "1")
    per_node, rest = args.split()
    assert render_entries(per_node) == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.11", "--master-port",
                                        "29501", "--headless", "--data-parallel-rank", "1", "--data-parallel-address",
                                        "10.0.0.11", "--data-parallel-rpc-port", "13345", "--data-parallel-start-rank", "1",
                                        "--data-parallel-size-local", "1"]
    assert rest == args.without(PER_NODE_OPTIONS)
    assert rest.argv() == [MODEL, "--max-model-len", "163840", "--tensor-parallel-size", "2"]


def test_without_drops_the_named_options_in_any_spelling_and_their_unknown_listing() -> None:
    args = args_of(MODEL, "--port", "8000", "--spec-remote-url", "u", "-tp", "2", "--model", MODEL)
    assert args.without(["--spec_remote_url", "-tp"]) == ServeArgs(MODEL, MODEL, (("--port", ("8000",)), ("--model", (MODEL,))))
    dropped = args.without([MODEL_OPTION])
    assert dropped.model == MODEL and dropped.positional is None and dropped.model_source == ""
    assert dropped.argv() == ["--port", "8000", "--spec-remote-url", "u", "--tensor-parallel-size", "2"]
    assert args.split(["--port"])[0] == (("--port", ("8000",)),)


# ---- the command lines of the field (docs: Serve shapes in the field) ----

def test_run_cluster_sh_runs_the_console_script_on_the_head() -> None:
    model = "/root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V3"
    for argv in (["vllm", "serve", model, "--tensor-parallel-size", "2"],
                 ["/usr/bin/python3", VLLM, "serve", model, "--tensor-parallel-size", "2"]):
        process = parse_serve_process(argv)
        assert process.form == SERVE_SCRIPT and process.model == model
        assert process.args.entries == (("--tensor-parallel-size", ("2",)),) and process.args.split()[0] == ()
    assert parse_serve_process(["ray", "start", "--block", "--head", "--port=6379"]) is None
    assert parse_serve_process(["ray", "start", "--block", "--address=10.0.0.11:6379"]) is None


def test_eugrs_launcher_execs_vllm_serve_under_a_wrapper_shell() -> None:
    command = (f"vllm serve {MODEL} --distributed-executor-backend ray --tensor-parallel-size 2 --max-model-len 65536 "
               "--gpu-memory-utilization 0.85 --host 0.0.0.0 --port 8000")
    assert parse_serve_process(["bash", "-c", f"eval \"$(tail -n 20 /root/.bashrc)\" && {command} >> /proc/1/fd/1"]) is None
    assert parse_serve_process(["sleep", "infinity"]) is None
    process = parse_serve_process(["/usr/bin/python3", VLLM, *command.split()[1:]])
    assert process.args.value("--distributed-executor-backend") == "ray" and process.args.value("-tp") == "2"
    assert process.args.unknown == ()


def test_a_multi_node_worker_splits_into_its_rank_and_the_shared_serve() -> None:
    process = parse_serve_process(["vllm", "serve", MODEL, "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.11",
                                   "--headless", "--tensor-parallel-size", "2"])
    per_node, rest = process.args.split()
    assert render_entries(per_node) == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.11", "--headless"]
    assert rest.argv() == [MODEL, "--tensor-parallel-size", "2"]


LAUNCHER_OWN = (MODEL_OPTION, "--served-model-name", "--host", "--port", "--tensor-parallel-size")


@pytest.mark.parametrize("preset", sorted(recorder.REPRESENTATIVE_PRESETS))
@pytest.mark.parametrize(("role", "nnodes"), [("head", 2), ("worker", 2), ("head", 1)])
def test_the_reference_launchers_own_command_lines(preset: str, role: str, nnodes: int) -> None:
    preset_args = recorder.REPRESENTATIVE_PRESETS[preset]
    step = launch_vllm_core.plan(recorder.sample_launcher_env(preset_args, role, nnodes))
    argv = [launch_vllm_core.ENTRYPOINT, *step.command]
    process = parse_serve_process(argv)
    head = role == "head"
    assert process.form == (API_SERVER if head else CLI_MAIN)
    assert process.prefix == ("python3", *(launch_vllm_core.HEAD_ENTRY if head else launch_vllm_core.WORKER_ENTRY))
    assert (process.model, process.args.model_source) == (launch_vllm_core.MODEL_MOUNT, "--model" if head else "positional")
    per_node, rest = process.args.split()
    multi_node = launch_vllm_core.multi_node_options(launch_vllm_core.read_settings(recorder.sample_launcher_env(preset_args, role, nnodes)))
    assert render_entries(per_node) == multi_node
    alone = parse_serve_args([MODEL, *preset_args]).without(LAUNCHER_OWN).entries
    assert rest.without(LAUNCHER_OWN).entries == alone and process.args.unknown == ()
    assert parse_serve_process(process.argv()) == process


# ---- properties ----

TABLE = serve_options()
SPELLINGS = sorted(s for s, spec in TABLE.options.items() if spec.canonical not in REFUSED_OPTIONS and spec.canonical != MODEL_OPTION)
WORD = st.from_regex(r"[A-Za-z0-9/._:,{}\"+]{1,12}", fullmatch=True)
NUMBER = st.integers(max_value=-1).map(str) | st.floats(max_value=-1e-3, allow_nan=False, allow_infinity=False).map(repr)
VALUE = WORD | NUMBER | st.just("")
ATTACHED = VALUE | st.from_regex(r"-[A-Za-z-][A-Za-z0-9 =-]{0,8}", fullmatch=True)
KEY = st.from_regex(r"[a-z][a-z_]{0,7}(\.[a-z_]{1,6})?\+?", fullmatch=True)


@st.composite
def option_item(draw: st.DrawFn) -> tuple[list[str], tuple[str, tuple[str, ...]]]:
    """Tokens of one option of the table in a spelling vLLM accepts, and the entry they must parse to."""
    spelling = draw(st.sampled_from(SPELLINGS))
    spec = TABLE.spec(spelling)
    name, canonical = spelling, spec.canonical
    if spelling.startswith("--") and draw(st.booleans()):
        name = "--" + spelling[2:].replace("-", "_")
    if spec.arity == "value" and spelling.startswith("--") and draw(st.integers(0, 4)) == 0:
        key = draw(KEY)
        name, canonical = f"{name}.{key}", f"{canonical}.{key}"
    if spec.arity == "flag":
        return [name], (canonical, ())
    if spec.arity != "optional" and draw(st.booleans()):
        value = draw(ATTACHED)
        return [f"{name}={value}"], (canonical, (value,))
    sizes = {"value": (1, 1), "optional": (0, 1), "one-or-more": (1, 3), "any": (0, 3)}[spec.arity]
    values = draw(st.lists(VALUE, min_size=sizes[0], max_size=sizes[1]))
    return [name, *values], (canonical, tuple(values))


@st.composite
def serve_argv(draw: st.DrawFn) -> tuple[list[str], tuple, str]:
    """vLLM's arguments built from the table's options, the model given as the positional (first, or after `--`) or
    with --model; and the entries they must parse to."""
    items = draw(st.lists(option_item(), max_size=8))
    tokens = [token for item, _ in items for token in item]
    entries = [entry for _, entry in items]
    model = draw(WORD)
    where = draw(st.sampled_from(["first", "after --", "--model"]))
    if where == "first":
        tokens = [model, *tokens]
    elif where == "after --":
        tokens = [*tokens, "--", model]
    else:
        tokens, entries = [*tokens, "--model", model], [*entries, (MODEL_OPTION, (model,))]
    return tokens, tuple(entries), model


@PROPERTY
@given(serve_argv())
def test_any_command_line_of_the_tables_options_parses_exactly_and_round_trips(case: tuple[list[str], tuple, str]) -> None:
    tokens, entries, model = case
    args = parse_serve_args(tokens)
    assert (args.entries, args.model, args.unknown) == (entries, model, ())
    assert parse_serve_args(args.argv()) == args
    process = parse_serve_process(["python3", "-u", VLLM, "serve", *tokens])
    assert process.args == args and parse_serve_process(process.argv()) == process


SOUP = st.sampled_from(["--", "-", "-1", "-1.5", "--config", "--help", "--version", "--model", MODEL, "--model=x", "--spec-x",
                        "--spec-x=1", "-n2", "-x", "--compilation-config.level", "--max_model_len=5", "", "-abc", "-x y",
                        "-n 2", "--=x", "-=x", "--enforce-eager=1", "--hf-token", "--served-model-name", "-tp", "--seed"]) | \
    st.sampled_from(SPELLINGS) | WORD | ATTACHED


@PROPERTY
@given(st.lists(SOUP, max_size=12), st.sampled_from([[], [MODEL], ["--model", MODEL]]),
       st.sampled_from([SERVE_SCRIPT, CLI_MAIN, API_SERVER]))
def test_any_tokens_parse_to_a_value_that_round_trips_or_are_refused_in_one_line(soup: list[str], model: list[str],
                                                                                  form: str) -> None:
    tokens = [*model, *soup]
    try:
        args = parse_serve_args(tokens, form)
    except IntegrityError as err:
        assert err.exit_code == 7 and "\n" not in err.one_line() and "; fix: " in err.one_line()
        return
    assert parse_serve_args(args.argv(), form) == args
    assert set(args.unknown) <= {name for name, _ in args.entries}
