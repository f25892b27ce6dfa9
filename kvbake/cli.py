"""The thin CLI: one subcommand calls one library function; the one place that maps errors to exit codes."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Callable, NoReturn

from kvbake import __version__
from kvbake.command_output import emit
from kvbake.errors import EXIT_CODES, KvbakeError, UsageError

log = logging.getLogger("kvbake")


def exit_meaning(cls: type[KvbakeError]) -> str:
    """What an exit code means: the base class's `meaning` (exit 1, a bug), every other class's docstring."""
    return KvbakeError.meaning if cls is KvbakeError else (cls.__doc__ or "").strip()


def exit_code_table() -> str:
    rows = ["  0  success"]
    rows += [f"  {cls.exit_code:<2} {cls.title}: {exit_meaning(cls)}" for cls in EXIT_CODES]
    return "exit codes:\n" + "\n".join(sorted(rows, key=lambda r: int(r.split()[0])))


COMMANDS_HELP = """commands:
  doctor            check the engine, the registry's TLS and login, every node, its base, disk and memory
  build (default)   bake the image of --manifest and its lock; print reference, ID and a summary
  plan              print everything a build would do; change nothing
  lock              pin the local base and the patches; write the lock and overlay/
  verify [IMAGE]    verify a local image against the manifest and lock (--deep reads files back)
  dockerfile        render Dockerfile.overlay next to the manifest
  keys              make a cosign key pair for signing releases
  sign              sign the pushed release and attach its SLSA provenance (cosign)
  trace             prove the chain link by link: donor, patches, files, layer, config, registry, signature, every rank
  rebase            --to IMAGE:TAG: report hunk by hunk how the chain moves to a new base; --accept DIR: take the candidate
  push              push the built image to the registry and read it back
  init              read the serve every node runs and write manifest.yaml and deploy.yaml describing it (no node changes)
  base sync         put the locked base in the registry once and on every node of --deploy (by digest)
  adopt             record the serve every node of --deploy runs now (kvbake did not deploy it) as the current release
  deploy            roll the release out to every node of --deploy (two phases; reverted on failure)
  rollback          go back to the previous release on every node (tag swap, nothing pulled)
  hand-back         after rollback --to adopted: give every node back to your launcher (kvbake's state and tags removed)
  verify-running    check every rank: layers, labels, exact switch set, no bind mount over baked files
  status            a table of nodes, releases, what runs and divergence
  export-k8s        write the pushed release for Kubernetes: a LeaderWorkerSet and sigstore admission policies, checked offline
  config PRESET     write the runtime configuration of a preset for every rank (--all; --check for drift)
  validate          run the supervised test plan against an endpoint; stop on any failure
  capacity PRESET   predict the KV capacity line the preset makes the serve log (--deploy: compare every rank's log)
"""


# Which stage's commands module runs each command (its function is `cmd_<command>`, dashes as underscores).
COMMAND_STAGES = {"build": "bake", "plan": "bake", "lock": "bake", "verify": "bake", "dockerfile": "bake",
                  "push": "ship", "base": "ship", "init": "ship", "adopt": "ship", "deploy": "ship", "rollback": "ship", "hand-back": "ship",
                  "verify-running": "ship", "status": "ship",
                  "doctor": "operate", "config": "operate", "validate": "operate", "capacity": "operate", "rebase": "rebase",
                  "keys": "provenance", "sign": "provenance", "trace": "provenance", "export-k8s": "kubernetes"}
BEFORE = "before_command_"
PROG = "python build.py"  # how build.py is run; the console script is CONSOLE_PROG
CONSOLE_PROG = "kvbake"
COMMON_DEFAULTS = {"manifest": Path("manifest.yaml"), "host": None, "json": False, "debug": False}


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are a UsageError (one line and exit 2), not usage text and SystemExit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see {self.prog} --help")  # a command's parser is named "<program> <command>"


def common_options(dest_prefix: str) -> argparse.ArgumentParser:
    """The options every command takes, before or after the command; unset ones stay absent (filled once later)."""
    common = OneLineParser(add_help=False)
    unset = argparse.SUPPRESS
    common.add_argument("--manifest", dest=dest_prefix + "manifest", default=unset, type=Path, metavar="PATH",
                        help="manifest path (default: ./manifest.yaml)")
    common.add_argument("--host", dest=dest_prefix + "host", default=unset, metavar="HOST",
                        help="docker host (default: the local engine / DOCKER_HOST)")
    common.add_argument("--json", dest=dest_prefix + "json", default=unset, action="store_true", help="print machine-readable JSON on stdout")
    common.add_argument("--debug", dest=dest_prefix + "debug", default=unset, action="store_true", help="log every step and show tracebacks")
    return common


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    common = common_options("")
    top = OneLineParser(prog=prog, description="kvbake: bake a pinned patch chain into a verified derived image.",
                                  epilog=COMMANDS_HELP + "\n" + exit_code_table(), formatter_class=argparse.RawDescriptionHelpFormatter,
                                  parents=[common_options(BEFORE)])
    top.add_argument("--version", action="version", version=f"kvbake {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")
    build = sub.add_parser("build", parents=[common], help="bake the image")
    build.add_argument("--builder", choices=("kvbake", "docker"), default="kvbake", help="kvbake (reproducible thin archive) or docker (docker build)")
    sub.add_parser("plan", parents=[common], help="print the plan; change nothing")
    lock = sub.add_parser("lock", parents=[common], help="create or refresh the lock and overlay/")
    lock.add_argument("--donor", type=Path, default=None, help="import the selected patches from a clean donor checkout")
    lock.add_argument("--code-change", default=None, metavar="REASON",
                      help="the chain is meant to bake other code than the proof's baseline serves: say why, once; the diff is kept in code-changes/")
    lock.add_argument("--rebase-base", action="store_true",
                      help="re-pin the base even though its reference now names another image than the lock pins")
    lock.add_argument("--migrate", action="store_true",
                      help="rewrite a format-1 or format-2 lock as format 3 (runtime sections out of the image identity, no saved layer sizes) without the engine")
    verify = sub.add_parser("verify", parents=[common], help="verify a local image")
    verify.add_argument("image", nargs="?", default=None, help="image reference (default: the manifest's output tag)")
    verify.add_argument("--deep", action="store_true", help="read files back and prove the patched code runs")
    verify.add_argument("--builder", choices=("kvbake", "docker"), default="kvbake", help="which builder made the image")
    sub.add_parser("dockerfile", parents=[common], help="render Dockerfile.overlay")
    push = sub.add_parser("push", parents=[common], help="push the built image, read it back by digest, record it")
    push.add_argument("--registry", default=None, metavar="HOST:PORT", help="push to this registry instead of output.repository's host")
    push.add_argument("--sign", type=Path, default=None, metavar="KEY",
                      help="then sign the pushed digest and attest its provenance with this cosign key (as the sign command does)")
    doctor = sub.add_parser("doctor", parents=[common], help="check this host, the registry and every node; change nothing")
    doctor.add_argument("--deploy", type=Path, default=None, help="deployment file whose nodes to check (default: none)")
    doctor.add_argument("--registry", default=None, metavar="HOST:PORT", help="the private registry (default: output.repository's host)")
    doctor.add_argument("--mem-floor", type=float, default=1.5, metavar="GIB", help="lowest MemAvailable a node may have (default 1.5)")
    doctor.add_argument("--disk-floor", type=float, default=20.0, metavar="GIB", help="least free disk in the manifest's folder and under each node's data root (default 20)")
    add_ship_commands(sub, common)
    add_validation_commands(sub, common)
    add_export_commands(sub, common)
    return top


def add_ship_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    ship = argparse.ArgumentParser(add_help=False)
    ship.add_argument("--deploy", default="deploy.yaml", type=Path, help="deployment file: nodes, roles, launcher (default: ./deploy.yaml)")
    changes = argparse.ArgumentParser(add_help=False)
    changes.add_argument("--break-lock", action="store_true", help="break a stale node lock (recorded in the audit log)")
    deploy = sub.add_parser("deploy", parents=[common, ship, changes], help="roll the release out to every node (two phases, reverted on failure)")
    deploy.add_argument("--preset", help="the preset (switch set and max-model-len) to run on every rank")
    deploy.add_argument("--image", help="pull reference repo@sha256:… (default: from the push record)")
    deploy.add_argument("--reason", help="why (recorded in the release record and the audit logs)")
    deploy.add_argument("--allow-held", action="store_true", help="allow a preset whose status is held (needs --reason)")
    deploy.add_argument("--allow-untested", action="store_true", help="allow a preset whose status is untested (needs --reason)")
    recovery = deploy.add_mutually_exclusive_group()  # both at once would silently do one of them
    recovery.add_argument("--resume", action="store_true", help="finish an interrupted deploy from its journal")
    recovery.add_argument("--revert", action="store_true", help="undo an interrupted deploy from its journal (also the repair of a diverged state)")
    recovery.add_argument("--reset-tags", action="store_true",
                          help="point every node's current and previous tags back at the images its release records name")
    deploy.add_argument("--reseat", action="append", default=[], metavar="NODE",
                        help="deploy to a node whose image store was switched since the last deploy (it starts empty); repeatable")
    deploy.add_argument("--dry-run", action="store_true",
                        help="print, for every node, the launcher's variables and the engine calls it would make (it runs with "
                             "--print); change nothing")
    init = sub.add_parser("init", parents=[common], help="write manifest.yaml and deploy.yaml from the serve the nodes run; change nothing there")
    init.add_argument("--node", action="append", default=[], required=True, metavar="NAME=HOST",
                      help="a serving node and its docker host (ssh://ops@spark-a, unix://…); repeat for every node")
    init.add_argument("--container", action="append", default=[], metavar="[NODE=]NAME",
                      help="the serving container (on NODE only, or on every node); default: found by the vLLM process it runs")
    init.add_argument("--out", type=Path, default=Path("."), metavar="DIR", help="the project folder to write (default: .)")
    init.add_argument("--template", type=Path, default=None, metavar="PATH",
                      help="the manifest whose chain, switches and presets to start from (default: the packaged production manifest)")
    init.add_argument("--registry", default=None, metavar="HOST:PORT", help="the private registry (output.repository's host)")
    init.add_argument("--donor-url", default=None, metavar="URL", help="the donor repository of the patch chain")
    init.add_argument("--donor-revision", default=None, metavar="REV", help="the reviewed donor commit (40 hex digits)")
    init.add_argument("--launcher", default=None, metavar="COMMAND",
                      help="the launcher command deploy.yaml names, split like a shell line (default: kvbake-launch-vllm)")
    init.add_argument("--signing-key", action="append", default=[], type=Path, metavar="PUB",
                      help="a reviewer's cosign public key; deploy.yaml requires every release to be signed with one listed key")
    init.add_argument("--capture", action="store_true",
                      help="write the files the serve runs over its image as the chain (patches/capNNN-*.patch), instead of the template's")
    init.add_argument("--force", action="store_true", help="overwrite manifest.yaml and deploy.yaml in --out")
    base = sub.add_parser("base", parents=[common, ship], help="put the locked base in the private registry and on every node")
    base.add_argument("action", choices=("sync",), help="sync: push the base if the registry lacks it, then pull it by digest on every node")
    base.add_argument("--registry", default=None, metavar="HOST:PORT", help="the private registry (default: output.repository's host)")
    base.add_argument("--force", action="store_true", help="move a node's base tag that names another image (the image stays, untagged)")
    adopt = sub.add_parser("adopt", parents=[common, ship, changes], help="record the serve every node runs now as the current release")
    adopt.add_argument("--reason", default="adopted the running serve", help="why (recorded in the release record and the audit logs)")
    adopt.add_argument("--container", default=None, metavar="NAME", help="the serving container on every node (default: each node's "
                       "container: in the deployment file, else launcher.container)")
    adopt.add_argument("--launcher-retired", action="store_true",
                       help="the launcher that started the serve is retired (docs/launchers.md, Retire your launcher): adopt a "
                            "serve started in the foreground or by an attached docker exec")
    adoption = adopt.add_mutually_exclusive_group()
    adoption.add_argument("--resume", action="store_true", help="finish an interrupted adopt from its journal")
    adoption.add_argument("--revert", action="store_true", help="undo an interrupted adopt from its journal")
    adoption.add_argument("--release", action="store_true", help="forget the adopted serve on every node and remove its kept container")
    rollback = sub.add_parser("rollback", parents=[common, ship, changes], help="swap current and previous on every rank, restart, verify")
    rollback.add_argument("--to", choices=("adopted",), default=None,
                          help="adopted: go back to the serve adopt recorded, whatever serves now (a rollback then returns)")
    sub.add_parser("hand-back", parents=[common, ship, changes], help="after rollback --to adopted: give every node back to the "
                   "launcher that started its serve: its restart policy back, kvbake's tags, containers and state removed, "
                   "the audit logs copied here; the serve keeps running")
    running = sub.add_parser("verify-running", parents=[common, ship], help="check what every rank runs")
    running.add_argument("--expect", default=None, help='exact switch set "NAME=VALUE,…"; "" means none (default: the recorded release)')
    status = sub.add_parser("status", parents=[common, ship], help="nodes, current and previous release, what runs, divergence")
    status.add_argument("--html", type=Path, default=None, metavar="PATH",
                        help="also write the table as a self-contained HTML page to PATH (no script, nothing fetched)")


def preset_status_flags() -> argparse.ArgumentParser:
    """The options that let a held or untested preset be used, with the reason."""
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("--allow-held", action="store_true", help="allow a preset whose status is held (needs --reason)")
    flags.add_argument("--allow-untested", action="store_true", help="allow a preset whose status is untested (needs --reason)")
    flags.add_argument("--reason", help="why a held or untested preset is used (recorded)")
    return flags


def add_validation_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    flags = preset_status_flags()
    config = sub.add_parser("config", parents=[common, flags], help="write the runtime configuration of a preset for every rank")
    config.add_argument("preset", nargs="?", default=None, help="the preset to write")
    config.add_argument("--all", action="store_true", help="every preset; held and untested ones with their status and a review override")
    config.add_argument("--check", action="store_true", help="regenerate and compare with --out; name every drifted, missing or extra file")
    config.add_argument("--out", type=Path, default=None, help="configuration folder (default: configs/ beside the manifest)")
    config.add_argument("--deploy", type=Path, default=None,
                        help="with --check: also compare what every node of this deployment file runs with the manifest's presets")
    validate = sub.add_parser("validate", parents=[common, flags], help="run the supervised test plan against an OpenAI-compatible endpoint")
    validate.add_argument("--preset", required=True, help="the preset the endpoint serves")
    validate.add_argument("--endpoint", required=True, metavar="URL", help="base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000")
    validate.add_argument("--model", default=None, help="model id (default: the first one GET /v1/models lists)")
    validate.add_argument("--corpus", type=Path, default=None, metavar="DIR", help="public corpus folder (default: the built-in synthetic filler)")
    validate.add_argument("--deploy", type=Path, default=None, help="deployment file: nodes to watch, container, release record")
    validate.add_argument("--api-key-env", default="VLLM_API_KEY", metavar="NAME",
                          help="the variable holding the serve's API key where kvbake runs, sent as a Bearer token and written "
                               "nowhere (default VLLM_API_KEY, vLLM's own); required when the deployment's SECRET_ENV names it")
    validate.add_argument("--depths", default=None, help="needle depths in tokens, e.g. 450000,500000 (default: two inside max-model-len)")
    validate.add_argument("--prefix-tokens", type=int, default=8000, metavar="N", help="prefix-identity prompt length (default 8000)")
    validate.add_argument("--corruption-tokens", type=int, default=8000, metavar="N", help="length of each corruption-set prompt (default 8000)")
    validate.add_argument("--pressure", default="0", metavar="auto|N",
                          help="also force pool pressure: auto derives the requests from the serve's KV pool so that vLLM must "
                               "preempt; N sends N concurrent long requests")
    validate.add_argument("--pressure-tokens", type=int, default=None, metavar="N", help="with --pressure N: length of each pressure request (default: the needle prompt's)")
    validate.add_argument("--seed", default="kvbake", help="seed of the needle codes (default kvbake)")
    validate.add_argument("--oracle", choices=("auto", "recall", "identity"), default="auto",
                          help="how the corruption set, needles and pressure are scored: recall (every answer holds its own "
                               "needle codes), identity (every answer equals its solo cold run) or auto (default: a short "
                               "recall probe in the first step chooses)")
    validate.add_argument("--mem-floor", type=float, default=1.5, metavar="GIB", help="stop when MemAvailable drops below this on any node (default 1.5)")
    validate.add_argument("--mem-interval", type=float, default=5.0, metavar="S", help="seconds between background memory samples; 0: only between steps")
    validate.add_argument("--meminfo-path", default="/proc/meminfo", help="meminfo file read inside the serving container")
    validate.add_argument("--rollback-on-failure", action="store_true", help="on a stop, roll every rank back to the previous release (needs --deploy)")
    rebase = sub.add_parser("rebase", parents=[common], help="report, hunk by hunk, how the locked chain moves to a new local base; "
                            "write a refreshed candidate chain beside the manifest; change nothing else")
    moves = rebase.add_mutually_exclusive_group(required=True)
    moves.add_argument("--to", metavar="IMAGE:TAG", help="the new base, already on this engine (never pulled)")
    moves.add_argument("--accept", type=Path, metavar="DIR", help="take the candidate in DIR (conflicts resolved): point the manifest "
                       "at its base, replace the changed patches, lock; show the manifest's diff and the replaced patches first")
    rebase.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="the candidate folder to create (default: rebase-<target config> beside the manifest)")
    keys = sub.add_parser("keys", parents=[common], help="make a cosign key pair for signing releases (password: COSIGN_PASSWORD or a prompt)")
    keys.add_argument("--out", type=Path, default=Path("."), metavar="DIR", help="the folder for NAME.key and NAME.pub (default: here)")
    keys.add_argument("--name", default="cosign", help="the key files' name (default: cosign)")
    sign = sub.add_parser("sign", parents=[common], help="sign the pushed release and attach its SLSA provenance (cosign)")
    sign.add_argument("--key", type=Path, required=True, metavar="PATH", help="the cosign private key (password: COSIGN_PASSWORD or a prompt)")
    trace = sub.add_parser("trace", parents=[common], help="check every link from the donor commit to every running rank; name the first "
                           "broken one with the two values that disagree")
    trace.add_argument("--deploy", type=Path, default=None, help="deployment file: also check what every rank runs (default: stop at the registry)")
    trace.add_argument("--key", type=Path, action="append", default=[], metavar="PATH",
                       help="a reviewer's cosign public key: check the signature and the SLSA attestation with it (repeatable)")
    capacity = sub.add_parser("capacity", parents=[common], help="predict a preset's KV capacity line; with --deploy compare every rank's log")
    capacity.add_argument("preset", help="the preset")
    capacity.add_argument("--model-config", type=Path, required=True, metavar="PATH", help="the model's config.json, or its folder")
    capacity.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="the platform, which names the line's pool (default cuda: GPU)")
    capacity.add_argument("--deploy", type=Path, default=None, help="deployment file: compare the line every node's serving container logged")


def replica_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of groups, 1 or more")
    return int(text)


def add_export_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    export = sub.add_parser("export-k8s", parents=[common, preset_status_flags()],
                            help="write the pushed release as a LeaderWorkerSet with sigstore ClusterImagePolicies, each "
                                 "checked against its pinned CRD schema and kvbake's own checks before anything is written")
    export.add_argument("--preset", required=True, help="the preset (switch set and max-model-len) every pod runs")
    export.add_argument("--out", required=True, type=Path, metavar="DIR|-",
                        help="the folder to create for the YAML files (refused when it exists, unless --force); - prints "
                             "them to stdout as one YAML stream")
    export.add_argument("--force", action="store_true", help="replace an existing --out folder as a whole")
    export.add_argument("--deploy", default="deploy.yaml", type=Path,
                        help="deployment file: ranks, launcher settings, signing keys (default: ./deploy.yaml)")
    export.add_argument("--replicas", type=replica_count, default=1, metavar="N",
                        help="groups of ranks, each a leader and its workers on their own nodes (default 1: one pair)")
    export.add_argument("--name", default=None, help="the LeaderWorkerSet's name (default: the manifest's name)")
    export.add_argument("--namespace", default=None, help="the namespace to serve in (default: the set's name)")
    model = export.add_mutually_exclusive_group(required=True)
    model.add_argument("--model-claim", default=None, metavar="NAME",
                       help="the PersistentVolumeClaim holding the model, mounted read-only where the launcher mounts it")
    model.add_argument("--model-host-path", default=None, metavar="PATH",
                       help="the model folder on every GPU node (a hostPath volume), mounted read-only")
    export.add_argument("--secret", default=None, metavar="NAME",
                        help="the Secret holding the serve's secret variables (deploy.yaml's SECRET_ENV), one key per "
                             "variable name; the pods read them by secretKeyRef")
    export.add_argument("--pull-secret", default=None, metavar="NAME",
                        help="the image pull secret of the private registry, for the pods and the policy-controller")
    export.add_argument("--policy", action=argparse.BooleanOptionalAction, default=True,
                        help="write the ClusterImagePolicies that admit only the release signed and attested with "
                             "deploy.yaml's signing keys (default: --policy)")


def configure_logging(debug: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def merge_common(top: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Each common option from either side of the command, or its default; a different value on each side is a usage error."""
    for name, default in COMMON_DEFAULTS.items():
        given = [getattr(args, key) for key in (BEFORE + name, name) if hasattr(args, key)]
        if len(given) == 2 and given[0] != given[1]:
            top.error(f"--{name} is given before and after the command with different values "
                      f"({given[0]} and {given[1]}); give it once")
        if hasattr(args, BEFORE + name):
            delattr(args, BEFORE + name)
        setattr(args, name, given[-1] if given else default)
    return args


def parse_args(argv: list[str], prog: str = PROG) -> argparse.Namespace:
    """Parse the command line; common options may come before or after the command. `args.prog` is the program's
    name as the user typed it, for the fixes that point to its help."""
    top = parser(prog)
    args = merge_common(top, top.parse_args(argv))
    args.prog = prog
    args.command = args.command or "build"
    if not hasattr(args, "builder"):
        args.builder = "kvbake"
    return args


def report(err: KvbakeError, debug: bool) -> int:
    """The one place an error becomes its line on stderr and its exit code."""
    if debug:
        log.exception("failed")
    print(f"error ({err.title}): {err.one_line()}", file=sys.stderr)
    return err.exit_code


def handler_of(command: str) -> Callable[[argparse.Namespace], tuple[dict, str]]:
    """The function of its stage's commands module that runs `command`."""
    from kvbake.bake import commands as bake
    from kvbake.kubernetes import commands as kubernetes
    from kvbake.operate import commands as operate
    from kvbake.provenance import commands as provenance
    from kvbake.rebase import commands as rebase
    from kvbake.ship import commands as ship

    stage = {"bake": bake, "ship": ship, "operate": operate, "rebase": rebase, "provenance": provenance,
             "kubernetes": kubernetes}[COMMAND_STAGES[command]]
    return getattr(stage, "cmd_" + command.replace("-", "_"))


def main(argv: list[str], prog: str = PROG) -> int:
    try:
        args = parse_args(argv, prog)
    except UsageError as err:
        return report(err, debug=False)
    configure_logging(args.debug)
    from kvbake.terminal.progress import show_on_terminal

    show_on_terminal(args.json)
    handler = handler_of(args.command)
    try:
        data, text = handler(args)
    except KvbakeError as err:
        return report(err, args.debug)
    emit(args, data, text)
    return 0


def entry() -> None:
    """The `kvbake` console script: the same commands as `python build.py`."""
    sys.exit(main(sys.argv[1:], CONSOLE_PROG))
