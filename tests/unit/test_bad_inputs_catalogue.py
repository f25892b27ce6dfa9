"""The bad-input catalogue (tests/data/bad_inputs.yaml, shown as docs/bad_inputs.md) is checked and its rows run as written."""

from __future__ import annotations

import ast
import contextlib
import fcntl
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import pytest
import yaml

from kvbake import cli as kvbake_cli
from kvbake.engines.adapters import client as engine_module
from kvbake.errors import EXIT_CODES, KvArithError, KvbakeError
from kvbake.kvarith import cli as kv_arith_cli
from tests.unit.helpers_manifest import MINIMAL, write_manifest

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = REPO / "docs" / "bad_inputs.md"
EXIT_CODES_PAGE = REPO / "docs" / "exit_codes.md"
STANDIN = REPO / "examples" / "standin"
K8S_EXAMPLE = REPO / "docs" / "kubernetes-standin"  # the export example's deploy.yaml and reviewer's key
KV_CONFIG = REPO / "tests" / "data" / "kvarith_configs" / "deepseek_v41_flash.json"
THIS = "tests/unit/test_bad_inputs_catalogue.py"
RUNNER = "test_bad_input"
AREAS = ("manifest", "lock", "patches", "donor", "base", "registry", "deployment file", "presets", "CLI", "kv_arith", "serve", "rebase", "signature",
         "kubernetes")
USAGE_EXIT = 2
BY_TITLE = {cls.title: cls for cls in EXIT_CODES}
BY_CODE = {cls.exit_code: cls for cls in EXIT_CODES}
KIND_LINE = re.compile(r"^error \((?P<kind>[a-z ]+)\): (?P<message>.*?); fix: .+$")
KV_ARITH_LINE = re.compile(r"^error: (?P<message>.*?); fix: .+$")


# ---------------------------------------------------------------------------------------------------------------
# The catalogue and the exit-code page's table, parsed.


@dataclass(frozen=True)
class Row:
    """One line of the catalogue's table."""

    number: int
    area: str
    input: str
    exit: int
    message: str
    test: str

    @property
    def path(self) -> str:
        return self.test.split("::", 1)[0]

    @property
    def function(self) -> str:
        return self.test.split("::", 1)[1].split("[", 1)[0]

    @property
    def param(self) -> str | None:
        match = re.search(r"\[(.+)\]$", self.test)
        return match.group(1) if match else None

    @property
    def executed_here(self) -> bool:
        return self.path == THIS and self.function == RUNNER


def docs_pages():
    """scripts/docs_pages.py, which reads the catalogue's table and generates its page (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_pages", REPO / "scripts" / "docs_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def catalogue_rows() -> list[Row]:
    """The rows of tests/data/bad_inputs.yaml, numbered from 1 in their order."""
    return [Row(number, row["area"], row["input"], row["exit"], row["message"], row["test"])
            for number, row in enumerate(docs_pages().bad_input_rows(), start=1)]


def documented_exit_codes() -> set[int]:
    """Every code the table of docs/exit_codes.md lists (a row such as 15–17 would list a range)."""
    text = EXIT_CODES_PAGE.read_text(encoding="utf-8")
    codes: set[int] = set()
    for line in text.splitlines():
        match = re.match(r"^\|\s*(\d+)(?:\s*[–-]\s*(\d+))?\s*\|", line)
        if match:
            low = int(match.group(1))
            codes.update(range(low, int(match.group(2) or low) + 1))
    return codes


# ---------------------------------------------------------------------------------------------------------------
# The inputs this module runs for real: each scenario prepares a project folder and names the command line.


@dataclass(frozen=True)
class Run:
    """A command line for build.py (`tool="build"`) or kv_arith, with extra environment variables."""

    argv: tuple[str, ...]
    tool: str = "build"
    env: Mapping[str, str] = field(default_factory=dict)


class Project:
    """The folder a scenario works in (the current directory while the command runs)."""

    def __init__(self, root: Path, stack: contextlib.ExitStack) -> None:
        self.root, self.stack = root, stack

    def standin(self) -> "Project":
        shutil.copytree(STANDIN, self.root, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".kvbake"))
        return self

    def tiny(self, text: str = MINIMAL) -> "Project":
        write_manifest(self.root, text)
        return self

    def write(self, relative: str, data: str | bytes) -> Path:
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            target.write_bytes(data)
        else:
            target.write_text(data, encoding="utf-8")
        return target

    def replace(self, relative: str, old: str, new: str) -> None:
        """Replace the first `old` in a text file; `old` must be there (a changed example fails loudly here)."""
        path = self.root / relative
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{relative} no longer holds {old!r}"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")

    def lock(self) -> dict:
        return json.loads((self.root / "manifest.lock.json").read_text(encoding="utf-8"))

    def write_lock(self, document: dict) -> None:
        self.write("manifest.lock.json", json.dumps(document, indent=1))

    def git(self, folder: str, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": str(self.root),
                    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
                    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"})
        done = subprocess.run(["git", "-C", str(self.root / folder), *args], env=env, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def donor(self, files: Mapping[str, bytes | str], pin: bool = True) -> str:
        """A committed donor checkout in donor/ holding `files`; with `pin`, the manifest pins its revision."""
        for relative, data in files.items():
            self.write(f"donor/{relative}", data)
        self.git(".", "init", "-q", "donor")
        self.git("donor", "add", "-A")
        self.git("donor", "commit", "-qm", "donor")
        revision = self.git("donor", "rev-parse", "HEAD")
        if pin:
            pinned = yaml.safe_load((self.root / "manifest.yaml").read_text(encoding="utf-8"))["donor"]["revision"]
            self.replace("manifest.yaml", pinned, revision)
        return revision

    def standin_patch(self, name: str = "0051-standin-kv-page-packing.patch") -> bytes:
        return (STANDIN / "patches" / name).read_bytes()


Scenario = Callable[[Project], Run]
SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str) -> Callable[[Scenario], Scenario]:
    def register(function: Scenario) -> Scenario:
        assert name not in SCENARIOS, name
        SCENARIOS[name] = function
        return function
    return register


def build(*argv: str, **env: str) -> Run:
    return Run(tuple(argv), "build", env)


def kv_arith(*argv: str) -> Run:
    return Run(tuple(argv), "kv_arith")


def plan() -> Run:
    return build("plan")


DEPLOY = """\
format: 1
nodes:
  - {name: spark-a, host: "ssh://ops@spark-a", role: head}
  - {name: spark-b, host: "ssh://ops@spark-b", role: worker}
launcher:
  command: ["/opt/serve/launch.sh"]
  container: vllm-serve
  timeout_s: 600
lock_stale_after_s: 900
"""

# -- manifest -------------------------------------------------------------------------------------------------


@scenario("manifest-absent")
def _(p: Project) -> Run:
    p.standin()
    return build("plan", "--manifest", "absent.yaml")


@scenario("manifest-directory")
def _(p: Project) -> Run:
    p.standin()
    (p.root / "manifests").mkdir()
    return build("plan", "--manifest", "manifests")


@scenario("manifest-malformed-yaml")
def _(p: Project) -> Run:
    p.tiny(MINIMAL.replace("format: 1\n", "format: [1\n"))
    return plan()


@scenario("manifest-duplicate-key")
def _(p: Project) -> Run:
    p.tiny(MINIMAL.replace("name: tiny\n", "name: tiny\nname: again\n"))
    return plan()


@scenario("manifest-unknown-key")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", "description: >-", "descripton: >-")
    return plan()


@scenario("manifest-missing-key")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", "output:\n  repository: 127.0.0.1:5000/kvbake/standin-kvpack\n",
                        "outputs:\n  repository: 127.0.0.1:5000/kvbake/standin-kvpack\n")
    return plan()


@scenario("manifest-wrong-type")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", "max_model_len: 163840", 'max_model_len: "163840"')
    return plan()


@scenario("manifest-format-2")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", "format: 1", "format: 2")
    return plan()


@scenario("manifest-not-a-mapping")
def _(p: Project) -> Run:
    p.standin().write("manifest.yaml", "- format: 1\n- name: standin-kvpack\n")
    return plan()


@scenario("manifest-duplicate-patch-id")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", '- id: "0053"', '- id: "0051"')
    return plan()


@scenario("manifest-needed-by-unknown")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", 'needed_by: ["0060", "0076"]', 'needed_by: ["0060", "0099"]')
    return plan()


@scenario("manifest-dependency-needed-by-nothing")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", '    needed_by: ["0060", "0076"]\n', "")
    return plan()


@scenario("manifest-requires-undeclared")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", "requires: [VLLM_EXL3_TF_PROMPT_TRANSIENT]", "requires: [VLLM_EXL3_TF_PROMPT_TRANSIEN]")
    return plan()


@scenario("manifest-declared-and-forbidden")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", "forbidden:\n", 'forbidden:\n  VLLM_DSV41_KV_PAIR: "off limits"\n')
    return plan()


@scenario("manifest-absolute-patch-path")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", "file: patches/0051-standin-kv-page-packing.patch", "file: /etc/0051.patch")
    return plan()


@scenario("manifest-dotdot-patch-path")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", "file: patches/0051-standin-kv-page-packing.patch", "file: ../0051.patch")
    return plan()


@scenario("manifest-symlink-escape")
def _(p: Project) -> Run:
    p.standin()
    outside = p.root.parent / "outside"
    outside.mkdir()
    (p.root / "linked").symlink_to(outside, target_is_directory=True)
    p.replace("manifest.yaml", "file: patches/0051-standin-kv-page-packing.patch", "file: linked/0051.patch")
    return plan()


@scenario("manifest-donor-userinfo")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", "url: https://example.invalid/", "url: https://ops:hunter22@example.invalid/")
    return plan()


@scenario("manifest-token-in-note")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", 'note: "every switch unset: the base code paths run"',
                        'note: "ghp_' + "a1B2c3D4e5F6g7H8i9J0" * 2 + '"')
    return plan()


@scenario("manifest-control-character")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", 'values: ["3"]', 'values: ["3\\n"]')
    return plan()


@scenario("manifest-unknown-tag-field")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", 'tag: "{base_tag}-kvpack-{short_id}"', 'tag: "{base_tag}-kvpack-{sha}"')
    return plan()


# -- lock -----------------------------------------------------------------------------------------------------


@scenario("lock-missing")
def _(p: Project) -> Run:
    p.standin()
    (p.root / "manifest.lock.json").unlink()
    return plan()


@scenario("lock-empty")
def _(p: Project) -> Run:
    p.standin().write("manifest.lock.json", b"")
    return plan()


@scenario("lock-truncated")
def _(p: Project) -> Run:
    data = p.standin().root.joinpath("manifest.lock.json").read_bytes()
    p.write("manifest.lock.json", data[: len(data) // 2])
    return plan()


@scenario("lock-not-utf8")
def _(p: Project) -> Run:
    data = p.standin().root.joinpath("manifest.lock.json").read_bytes()
    p.write("manifest.lock.json", data.replace(b'"format"', b'"form\xe9t"', 1))
    return plan()


@scenario("lock-directory")
def _(p: Project) -> Run:
    p.standin()
    (p.root / "manifest.lock.json").unlink()
    (p.root / "manifest.lock.json").mkdir()
    return plan()


@scenario("lock-not-an-object")
def _(p: Project) -> Run:
    p.standin().write("manifest.lock.json", "[]\n")
    return plan()


@scenario("lock-duplicate-key")
def _(p: Project) -> Run:
    p.standin().replace("manifest.lock.json", '"format": 3,', '"format": 3,\n "format": 3,')
    return plan()


@scenario("lock-nan")
def _(p: Project) -> Run:
    p.standin().replace("manifest.lock.json", '"source_date_epoch": ', '"source_date_epoch": NaN, "x": ')
    return plan()


@scenario("lock-missing-key")
def _(p: Project) -> Run:
    document = p.standin().lock()
    del document["derived"]
    p.write_lock(document)
    return plan()


@scenario("lock-unknown-key")
def _(p: Project) -> Run:
    document = p.standin().lock()
    document["base"]["digest"] = "sha256:" + "0" * 64
    p.write_lock(document)
    return plan()


@scenario("lock-wrong-type")
def _(p: Project) -> Run:
    document = p.standin().lock()
    document["files"][0]["mode"] = "0644"
    p.write_lock(document)
    return plan()


@scenario("lock-unknown-change")
def _(p: Project) -> Run:
    document = p.standin().lock()
    document["patches"][0]["files"][0]["change"] = "delete"
    p.write_lock(document)
    return plan()


@scenario("lock-path-outside")
def _(p: Project) -> Run:
    document = p.standin().lock()
    document["files"][0]["path"] = "../etc/passwd"
    p.write_lock(document)
    return plan()


@scenario("lock-format-4")
def _(p: Project) -> Run:
    document = p.standin().lock()
    document["format"] = 4
    p.write_lock(document)
    return plan()


@scenario("lock-drifted")
def _(p: Project) -> Run:
    p.standin().replace("manifest.yaml", 'values: ["3"]', 'values: ["3", "4"]')
    return plan()


@scenario("lock-overlay-file-missing")
def _(p: Project) -> Run:
    p.standin()
    (p.root / "overlay" / "vllm" / "envs.py").unlink()
    return plan()


@scenario("lock-source-date-epoch")
def _(p: Project) -> Run:
    p.standin()
    return build("lock", SOURCE_DATE_EPOCH="yesterday")


@scenario("lock-epoch-unreadable")
def _(p: Project) -> Run:
    document = p.standin().lock()
    document["source_date_epoch"] = "soon"
    p.write_lock(document)
    return build("lock")


@scenario("lock-already-running")
def _(p: Project) -> Run:
    handle = os.open(p.standin().root / "manifest.yaml", os.O_RDONLY)
    p.stack.callback(os.close, handle)
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return build("lock")


@scenario("lock-interrupted-unresolved")
def _(p: Project) -> Run:
    p.standin()
    shutil.copytree(p.root / "overlay", p.root / "overlay.old.0123456789abcdef-01234567")
    return build("lock")


# -- donor ----------------------------------------------------------------------------------------------------


@scenario("donor-absent")
def _(p: Project) -> Run:
    p.standin()
    return build("lock", "--donor", "donor")


@scenario("donor-not-a-checkout")
def _(p: Project) -> Run:
    p.standin().write("donor/0051-standin-kv-page-packing.patch", p.standin_patch())
    return build("lock", "--donor", "donor")


@scenario("donor-other-revision")
def _(p: Project) -> Run:
    p.standin().donor({"patches/0051-standin-kv-page-packing.patch": p.standin_patch()}, pin=False)
    return build("lock", "--donor", "donor")


@scenario("donor-dirty")
def _(p: Project) -> Run:
    p.standin().donor({"patches/0051-standin-kv-page-packing.patch": p.standin_patch()})
    p.write("donor/notes.txt", "work in progress\n")
    return build("lock", "--donor", "donor")


@scenario("donor-without-patch")
def _(p: Project) -> Run:
    p.standin().donor({"README": "no patches here\n"})
    return build("lock", "--donor", "donor")


@scenario("donor-two-candidates")
def _(p: Project) -> Run:
    patch = p.standin().standin_patch()
    p.donor({"a/0051-standin-kv-page-packing.patch": patch, "b/0051-standin-kv-page-packing.patch": patch})
    return build("lock", "--donor", "donor")


@scenario("donor-symlink-entry")
def _(p: Project) -> Run:
    p.standin().write("donor/real.txt", "not a patch\n")
    (p.root / "donor" / "0051-standin-kv-page-packing.patch").symlink_to("real.txt")
    p.donor({})
    return build("lock", "--donor", "donor")


# -- registry -------------------------------------------------------------------------------------------------


@scenario("registry-option-with-path")
def _(p: Project) -> Run:
    p.standin()
    return build("push", "--registry", "registry.example/team")


@scenario("registry-option-empty-host")
def _(p: Project) -> Run:
    p.standin()
    return build("push", "--registry", "https://")


# -- deployment file ------------------------------------------------------------------------------------------


def deploy_file(p: Project, text: str, command: str = "status") -> Run:
    p.standin().write("deploy.yaml", text)
    return build(command, "--deploy", "deploy.yaml")


@scenario("deploy-absent")
def _(p: Project) -> Run:
    p.standin()
    return build("status")


@scenario("deploy-directory")
def _(p: Project) -> Run:
    p.standin()
    (p.root / "deploy.yaml").mkdir()
    return build("status")


@scenario("deploy-malformed-yaml")
def _(p: Project) -> Run:
    return deploy_file(p, DEPLOY.replace("role: head}", "role: head"))


@scenario("deploy-unknown-key")
def _(p: Project) -> Run:
    return deploy_file(p, DEPLOY.replace('host: "ssh://ops@spark-a"', 'hots: "ssh://ops@spark-a"'))


@scenario("deploy-missing-launcher")
def _(p: Project) -> Run:
    return deploy_file(p, DEPLOY.split("launcher:")[0])


@scenario("deploy-host-scheme")
def _(p: Project) -> Run:
    return deploy_file(p, DEPLOY.replace('"ssh://ops@spark-a"', '"spark-a:2375"'))


@scenario("deploy-unknown-role")
def _(p: Project) -> Run:
    return deploy_file(p, DEPLOY.replace("role: worker", "role: leader"))


@scenario("deploy-repeated-node")
def _(p: Project) -> Run:
    return deploy_file(p, DEPLOY.replace("name: spark-b", "name: spark-a"))


@scenario("deploy-password-in-host")
def _(p: Project) -> Run:
    return deploy_file(p, DEPLOY.replace('"ssh://ops@spark-a"', '"ssh://ops:hunter22@spark-a"'))


@scenario("deploy-no-nodes")
def _(p: Project) -> Run:
    return deploy_file(p, "format: 1\nnodes: []\n" + "launcher:" + DEPLOY.split("launcher:")[1])


@scenario("deploy-timeout-zero")
def _(p: Project) -> Run:
    return deploy_file(p, DEPLOY.replace("timeout_s: 600", "timeout_s: 0"))


@scenario("deploy-format-2")
def _(p: Project) -> Run:
    return deploy_file(p, DEPLOY.replace("format: 1", "format: 2"))


@scenario("deploy-diverged")
def _(p: Project) -> Run:
    p.standin().write(".kvbake/deploy/DIVERGED.json", json.dumps(
        {"revert_error": "node spark-b went away", "repair": "python build.py deploy --revert"}))
    return deploy_file(p, DEPLOY, "rollback")


@scenario("deploy-diverged-marker-corrupt")
def _(p: Project) -> Run:
    p.standin().write(".kvbake/deploy/DIVERGED.json", "{half")
    return deploy_file(p, DEPLOY, "rollback")


def node_launch(p: Project, launch: str, *command: str) -> Run:
    """The deployment file with spark-a's own launch settings (flow YAML), then `status` or the given command."""
    p.standin().write("deploy.yaml", DEPLOY.replace("role: head}", f"role: head, launch: {launch}}}"))
    return build(*(command or ("status",)), "--deploy", "deploy.yaml")


@scenario("deploy-launch-code-override")
def _(p: Project) -> Run:
    return node_launch(p, "{env: {PYTHONPATH: /srv/patches}}")


@scenario("deploy-launch-unknown-ulimit")
def _(p: Project) -> Run:
    return node_launch(p, "{ulimits: {openfiles: 1024}}")


@scenario("deploy-launch-cache-in-packages")
def _(p: Project) -> Run:
    return node_launch(p, '{cache_mounts: ["/srv/c:/opt/venv/lib/python3.12/site-packages/c"]}')


@scenario("deploy-launch-bad-interface")
def _(p: Project) -> Run:
    return node_launch(p, '{env: {NCCL_SOCKET_IFNAME: "enp1s0 f0"}}')


@scenario("deploy-launch-switch")
def _(p: Project) -> Run:
    image = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "ab" * 32
    return node_launch(p, "{env: {VLLM_DSV41_KV_PAIR: '3'}}", "deploy", "--dry-run", "--preset", "control", "--image", image)


@scenario("deploy-launch-cache-over-sources")
def _(p: Project) -> Run:
    return node_launch(p, '{cache_mounts: ["/srv/c:/usr/local/lib"]}')


# -- presets --------------------------------------------------------------------------------------------------


def unlocked_standin(p: Project, old: str, new: str) -> Project:
    """The stand-in with its manifest edited and its lock removed (config works unlocked)."""
    p.standin().replace("manifest.yaml", old, new)
    (p.root / "manifest.lock.json").unlink()
    return p


PACKING_SWITCHES = '      VLLM_DSV41_KV_PAIR: "3"\n      VLLM_DSV41_DROP_MTP_BUFFER: "1"\n'


@scenario("preset-unknown")
def _(p: Project) -> Run:
    p.standin()
    return build("config", "packing")


@scenario("preset-held")
def _(p: Project) -> Run:
    p.standin()
    return build("config", "longctx-524288")


@scenario("preset-held-without-reason")
def _(p: Project) -> Run:
    p.standin()
    return build("config", "longctx-524288", "--allow-held")


@scenario("preset-untested")
def _(p: Project) -> Run:
    p.standin()
    return build("config", "longctx-1048576")


@scenario("preset-reason-control-character")
def _(p: Project) -> Run:
    p.standin()
    return build("config", "longctx-524288", "--allow-held", "--reason", "window\x1b[2J")


@scenario("preset-forbidden-switch")
def _(p: Project) -> Run:
    unlocked_standin(p, PACKING_SWITCHES, PACKING_SWITCHES + '      VLLM_DSV41_NVFP4_KV: "1"\n')
    return build("config", "packing-327680")


@scenario("preset-value-not-allowed")
def _(p: Project) -> Run:
    unlocked_standin(p, PACKING_SWITCHES, PACKING_SWITCHES.replace('"3"', '"2"'))
    return build("config", "packing-327680")


@scenario("preset-undeclared-switch")
def _(p: Project) -> Run:
    unlocked_standin(p, PACKING_SWITCHES, PACKING_SWITCHES + '      VLLM_DSV41_KV_PAIRS: "3"\n')
    return build("config", "packing-327680")


@scenario("preset-missing-requires")
def _(p: Project) -> Run:
    unlocked_standin(p, '      VLLM_EXL3_TF_PROMPT_TRANSIENT: "1"\n      VLLM_EXL3_TF_PROMPT_ALIAS: "1"\n    note: "stand-in of',
                     '      VLLM_EXL3_TF_PROMPT_ALIAS: "1"\n    note: "stand-in of')
    return build("config", "packing-327680")


@scenario("preset-above-drafter-limit")
def _(p: Project) -> Run:
    unlocked_standin(p, "presets:\n", "drafter: {max_positions: 163840}\npresets:\n")
    return build("config", "packing-327680")


@scenario("preset-config-drift")
def _(p: Project) -> Run:
    p.standin().replace("configs/control/ranks.env", "\n", "\nVLLM_DSV41_KV_PAIR=3\n")
    return build("config", "--check")


@scenario("preset-config-never-written")
def _(p: Project) -> Run:
    shutil.rmtree(p.standin().root / "configs")
    return build("config", "--check")


@scenario("preset-config-folder-empty")
def _(p: Project) -> Run:
    shutil.rmtree(p.standin().root / "configs")
    (p.root / "configs").mkdir()
    return build("config", "--check")


@scenario("preset-config-never-written-unlocked")
def _(p: Project) -> Run:
    shutil.rmtree(p.standin().root / "configs")
    (p.root / "manifest.lock.json").unlink()
    return build("config", "--check")


@scenario("preset-validate-unknown")
def _(p: Project) -> Run:
    p.standin()
    return build("validate", "--preset", "nope", "--endpoint", "http://127.0.0.1:9")


@scenario("preset-validate-depth-too-long")
def _(p: Project) -> Run:
    p.standin()
    return build("validate", "--preset", "control", "--endpoint", "http://127.0.0.1:9", "--depths", "450000")


# -- CLI ------------------------------------------------------------------------------------------------------


@scenario("cli-unknown-command")
def _(p: Project) -> Run:
    p.standin()
    return build("bake")


@scenario("cli-unknown-option")
def _(p: Project) -> Run:
    p.standin()
    return build("plan", "--dry-run")


@scenario("cli-missing-value")
def _(p: Project) -> Run:
    p.standin()
    return build("plan", "--manifest")


@scenario("cli-bad-choice")
def _(p: Project) -> Run:
    p.standin()
    return build("build", "--builder", "buildah")


@scenario("cli-bad-integer")
def _(p: Project) -> Run:
    p.standin()
    return build("validate", "--preset", "control", "--endpoint", "http://127.0.0.1:9", "--prefix-tokens", "many")


@scenario("cli-required-option")
def _(p: Project) -> Run:
    p.standin()
    return build("validate", "--preset", "control")


@scenario("cli-conflicting-sides")
def _(p: Project) -> Run:
    p.standin()
    return build("--manifest", "manifest.yaml", "plan", "--manifest", "other.yaml")


@scenario("cli-config-without-preset")
def _(p: Project) -> Run:
    p.standin()
    return build("config")


@scenario("cli-config-preset-and-all")
def _(p: Project) -> Run:
    p.standin()
    return build("config", "control", "--all")


@scenario("cli-corpus-absent")
def _(p: Project) -> Run:
    p.standin()
    return build("validate", "--preset", "control", "--endpoint", "http://127.0.0.1:9", "--corpus", "corpus")


@scenario("cli-validate-oracle")
def _(p: Project) -> Run:
    p.standin()
    return build("validate", "--preset", "control", "--endpoint", "http://127.0.0.1:9", "--oracle", "magic")


@scenario("cli-deploy-resume-and-revert")
def _(p: Project) -> Run:
    p.standin().write("deploy.yaml", DEPLOY)
    return build("deploy", "--resume", "--revert", "--deploy", "deploy.yaml")


GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8"
HF_TOKEN = "hf_" + "AbCdEfGhIj" * 3 + "kLmN"


@scenario("cli-reason-token-deploy")
def _(p: Project) -> Run:
    p.standin().write("deploy.yaml", DEPLOY)
    return build("deploy", "--preset", "control", "--reason", f"rollout {GITHUB_TOKEN}", "--deploy", "deploy.yaml")


@scenario("cli-reason-userinfo-adopt")
def _(p: Project) -> Run:
    p.standin().write("deploy.yaml", DEPLOY)
    return build("adopt", "--reason", "as in https://ops:hunter22@wiki.example/serve", "--deploy", "deploy.yaml")


@scenario("cli-reason-password-config")
def _(p: Project) -> Run:
    p.standin()
    return build("config", "longctx-524288", "--allow-held", "--reason", "window password=hunter22")


@scenario("cli-reason-token-validate")
def _(p: Project) -> Run:
    p.standin()
    return build("validate", "--preset", "control", "--endpoint", "http://127.0.0.1:9", "--reason", f"probe {HF_TOKEN}")


@scenario("cli-endpoint-userinfo")
def _(p: Project) -> Run:
    p.standin()
    return build("validate", "--preset", "control", "--endpoint", "http://ops:hunter22@127.0.0.1:9")


# -- kubernetes -----------------------------------------------------------------------------------------------


def k8s_project(p: Project, pushed: bool = True) -> Project:
    """The stand-in with the export example's deploy.yaml and key, and (unless told) a push record of its release."""
    from kvbake.bake.core.plan import tag_for
    from kvbake.lock import read_lock
    from kvbake.manifest import load_manifest
    from kvbake.ship.core.push_record import PUSHES_DIR

    p.standin()
    for name in ("deploy.yaml", "reviewer.pub"):
        p.write(name, (K8S_EXAMPLE / name).read_text(encoding="utf-8"))
    if pushed:
        manifest = load_manifest(p.root / "manifest.yaml")
        p.write(f"{PUSHES_DIR}/{tag_for(manifest, read_lock(manifest))}.json",
                json.dumps({"pinned": f"{manifest.output.repository}@sha256:{'5e' * 32}"}))
    return p


def export_k8s(*argv: str) -> Run:
    return build("export-k8s", "--model-claim", "standin-model", "--out", "k8s", *argv)


@scenario("k8s-never-pushed")
def _(p: Project) -> Run:
    k8s_project(p, pushed=False)
    return export_k8s("--preset", "control", "--secret", "standin-serve")


@scenario("k8s-unknown-preset")
def _(p: Project) -> Run:
    k8s_project(p)
    return export_k8s("--preset", "packing-999", "--secret", "standin-serve")


@scenario("k8s-policy-without-signing-keys")
def _(p: Project) -> Run:
    k8s_project(p).replace("deploy.yaml", "signing:\n  require_signature: true\n  keys: [reviewer.pub]\n", "")
    return export_k8s("--preset", "control", "--secret", "standin-serve")


@scenario("k8s-out-exists")
def _(p: Project) -> Run:
    k8s_project(p).write("k8s/earlier.yaml", "kind: Namespace\n")
    return export_k8s("--preset", "control", "--secret", "standin-serve")


@scenario("k8s-secret-not-named")
def _(p: Project) -> Run:
    k8s_project(p)
    return export_k8s("--preset", "control")


# -- kv_arith -------------------------------------------------------------------------------------------------


def kv_config(p: Project, data: str | bytes | None = None) -> str:
    p.write("config.json", KV_CONFIG.read_bytes() if data is None else data)
    return "config.json"


def kv(p: Project, *argv: str, config: str | bytes | None = None) -> Run:
    return kv_arith("--config", kv_config(p, config), "--max-model-len", "327680", *argv)


@scenario("kv-required")
def _(p: Project) -> Run:
    return kv_arith("--max-model-len", "327680", "--pool-bytes", "10GiB")


@scenario("kv-config-absent")
def _(p: Project) -> Run:
    return kv_arith("--config", "absent.json", "--max-model-len", "327680", "--pool-bytes", "10GiB")


@scenario("kv-config-directory")
def _(p: Project) -> Run:
    (p.root / "configs").mkdir()
    return kv_arith("--config", "configs", "--max-model-len", "327680", "--pool-bytes", "10GiB")


@scenario("kv-config-not-json")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes", "10GiB", config='{"model_type": "deepseek_v41",\n')


@scenario("kv-config-not-an-object")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes", "10GiB", config="[1, 2, 3]\n")


@scenario("kv-config-unknown-model")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes", "10GiB", config='{"model_type": "llama"}\n')


@scenario("kv-config-missing-field")
def _(p: Project) -> Run:
    document = json.loads(KV_CONFIG.read_text())
    del document["text_config"]["sliding_window"]
    return kv(p, "--pool-bytes", "10GiB", config=json.dumps(document))


@scenario("kv-size-unit")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes", "10 parsecs")


@scenario("kv-size-negative")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes=-1GiB")


@scenario("kv-no-pool")
def _(p: Project) -> Run:
    return kv(p)


@scenario("kv-pack-not-group")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes", "10GiB", "--pack", "swa")


@scenario("kv-pack-twice")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes", "10GiB", "--pack", "swa=2", "--pack", "swa=3")


@scenario("kv-mix-without-pressure")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes", "10GiB", "--mix", "150000x3")


@scenario("kv-pressure-without-mix")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes", "10GiB", "--pressure")


@scenario("kv-mix-entry")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes", "10GiB", "--pressure", "--mix", "150000x")


@scenario("kv-above-max-positions")
def _(p: Project) -> Run:
    return kv_arith("--config", kv_config(p), "--max-model-len", "2000000", "--pool-bytes", "10GiB")


@scenario("kv-both-pools")
def _(p: Project) -> Run:
    return kv(p, "--pool-bytes", "10GiB", "--num-blocks", "100")


@scenario("kv-not-an-integer")
def _(p: Project) -> Run:
    return kv_arith("--config", kv_config(p), "--max-model-len", "long", "--pool-bytes", "10GiB")


# ---------------------------------------------------------------------------------------------------------------
# Running a scenario: in its own folder, with no engine, capturing what the user would see.


class NoEngine:
    """Stands in for python-on-whales' client: any use means the input reached an engine, which these rows must not."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name: str):
        raise AssertionError(f"the command contacted an engine (client.{name}); this row must fail before any engine call")


@dataclass(frozen=True)
class Outcome:
    """What a command did: its exit code, its output streams, the project folder before and after."""

    code: int
    out: str
    err: str
    before: dict[str, bytes | None]
    after: dict[str, bytes | None]
    scratch: tuple[str, ...]


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry under `root`: a file's bytes, a link's target, None for a folder."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[relative] = os.readlink(path).encode()
        elif path.is_file():
            found[relative] = path.read_bytes()
        else:
            found[relative] = None
    return found


def execute(prepare: Scenario, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Outcome:
    """Prepare a scenario in `tmp`, run it with the current directory in its project folder, no engine and a private temp folder."""
    root, scratch = tmp / "project", tmp / "scratch"
    root.mkdir()
    scratch.mkdir()
    with contextlib.ExitStack() as stack:
        run = prepare(Project(root, stack))
        monkeypatch.chdir(root)
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))
        monkeypatch.setattr(engine_module, "DockerClient", NoEngine)
        monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
        for key, value in run.env.items():
            monkeypatch.setenv(key, value)
        before = snapshot(root)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if run.tool == "kv_arith":
                code = kv_arith_cli.main(list(run.argv), out, err)
            else:
                try:
                    code = kvbake_cli.main(list(run.argv))
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else 1
        after = snapshot(root)
    return Outcome(code, out.getvalue(), err.getvalue(), before, after, tuple(p.name for p in scratch.iterdir()))


def error_line(row: Row, err: str) -> tuple[str | None, str]:
    """(kind, message) of the one error line `err` must be; the kind is None where the line has no kind."""
    lines = err.splitlines()
    if row.area == "kv_arith":
        assert len(lines) == 1 and err.endswith("\n"), err
        match = KV_ARITH_LINE.match(lines[0])
        assert match, f"not kv_arith's `error: <cause>; fix: <what to do>`: {err}"
        return None, match.group("message")
    assert len(lines) == 1 and err.endswith("\n"), f"stderr is not exactly one line: {err!r}"
    match = KIND_LINE.match(lines[0])
    assert match, f"not `error (<kind>): <cause>; fix: <what to do>`: {err}"
    return match.group("kind"), match.group("message")


# ---------------------------------------------------------------------------------------------------------------
# The tests.


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.function.__name__ == RUNNER:
        rows = [row for row in catalogue_rows() if row.executed_here]
        metafunc.parametrize("row", rows, ids=[row.param or str(row.number) for row in rows])


def test_bad_input(row: Row, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert row.param in SCENARIOS, f"row {row.number} names {row.test}, which has no scenario in this module"
    outcome = execute(SCENARIOS[row.param], tmp_path, monkeypatch)
    assert outcome.code == row.exit, f"row {row.number}: exit {outcome.code}, the catalogue says {row.exit}; stderr: {outcome.err}"
    assert outcome.out == "", f"row {row.number}: a failed command printed on stdout: {outcome.out}"
    kind, message = error_line(row, outcome.err)
    if kind is not None:
        assert kind in BY_TITLE, f"row {row.number}: unknown kind {kind!r}"
        assert BY_TITLE[kind].exit_code == row.exit, f"row {row.number}: kind {kind!r} owns exit {BY_TITLE[kind].exit_code}"
    assert message.startswith(row.message), f"row {row.number}: the message is {message!r}, the catalogue says {row.message!r}…"
    assert outcome.after == outcome.before, f"row {row.number}: the failed command changed the project folder"
    assert outcome.scratch == (), f"row {row.number}: the failed command left temporary files: {outcome.scratch}"


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return catalogue_rows()


def test_the_catalogue_has_enough_rows_numbered_once(rows: list[Row]) -> None:
    numbers = [row.number for row in rows]
    assert len(rows) >= 60
    assert numbers == list(range(1, len(rows) + 1)), "rows are numbered 1, 2, 3, … in order, each once"
    assert len({row.test for row in rows if row.executed_here}) == len([row for row in rows if row.executed_here])


def test_every_area_is_covered_by_at_least_four_rows(rows: list[Row]) -> None:
    assert {row.area for row in rows} == set(AREAS)
    for area in AREAS:
        assert len([row for row in rows if row.area == area]) >= 4, area


def test_every_message_is_a_cause_without_the_prefix_or_the_fix(rows: list[Row]) -> None:
    for row in rows:
        assert row.message and not row.message.startswith("error"), row
        assert "; fix:" not in row.message, row


def test_every_exit_code_is_documented_and_owned_by_an_error_class(rows: list[Row]) -> None:
    documented = documented_exit_codes()
    assert {0, 1, 2, 17} <= documented
    for row in rows:
        assert row.exit in documented and row.exit not in (0, 1), row
        assert row.exit in BY_CODE, row


def test_the_exit_code_page_and_the_error_classes_agree() -> None:
    documented = documented_exit_codes()
    assert {cls.exit_code for cls in EXIT_CODES} | {0} == documented


def test_every_scenario_here_is_in_the_catalogue_exactly_once(rows: list[Row]) -> None:
    named = sorted(row.param for row in rows if row.executed_here)
    assert sorted(SCENARIOS) == named


def test_the_catalogue_page_is_generated_from_the_table() -> None:
    assert CATALOGUE.read_text(encoding="utf-8") == docs_pages().bad_inputs_page(), \
        "docs/bad_inputs.md is stale; regenerate it with python scripts/docs_pages.py"


def test_kv_arith_rows_use_its_own_exit_codes(rows: list[Row]) -> None:
    for row in rows:
        if row.area == "kv_arith":
            assert row.exit in (USAGE_EXIT, KvArithError.exit_code), row


def definitions(path: str) -> dict[str, str]:
    """Each module-level function of `path` and its source, decorators included."""
    text = (REPO / path).read_text(encoding="utf-8")
    lines = text.splitlines()
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            found[node.name] = "\n".join(lines[first - 1:node.end_lineno])
    return found


def source_with_helpers(path: str, name: str) -> str:
    """A test function's source and that of every helper it calls that its module defines or imports from a sibling module."""
    module = ast.parse((REPO / path).read_text(encoding="utf-8"))
    local = definitions(path)
    imported = {alias.asname or alias.name: f"{Path(path).parent.as_posix()}/{node.module}.py"
                for node in module.body if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                for alias in node.names if (REPO / Path(path).parent / f"{node.module}.py").is_file()}
    function = next(node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == name)
    called = {node.func.id for node in ast.walk(function) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    parts = [local[name]]
    for helper in sorted(called - {name}):
        if helper in local:
            parts.append(local[helper])
        elif helper in imported:
            parts.append(definitions(imported[helper]).get(helper, ""))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def collected(rows: list[Row]) -> set[str]:
    """The node ids pytest collects for every parametrized test of another file that a row names (one collection run)."""
    functions = sorted({f"{row.path}::{row.function}" for row in rows if row.param is not None and not row.executed_here})
    if not functions:
        return set()
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *functions],
                          cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def test_every_referenced_test_exists_and_checks_the_rows_exit_code(rows: list[Row], collected: set[str]) -> None:
    for row in rows:
        if row.executed_here:
            continue
        assert row.path.startswith("tests/") and row.path.endswith(".py") and (REPO / row.path).is_file(), row
        functions = definitions(row.path)
        assert row.function in functions, f"row {row.number}: {row.path} has no test {row.function}"
        if row.param is not None:
            assert row.test in collected, f"row {row.number}: pytest collects no {row.test}"
        source = source_with_helpers(row.path, row.function)
        cls = BY_CODE[row.exit]
        assert cls.__name__ in source or re.search(rf"\b{row.exit}\b", source), (
            f"row {row.number}: {row.test} names neither {cls.__name__} nor exit {row.exit}")


def test_no_row_names_a_path_of_this_machine(rows: list[Row]) -> None:
    text = CATALOGUE.read_text(encoding="utf-8")
    for marker in (str(REPO), "/tmp/", "/home/", "/root/"):
        assert marker not in text


# ---------------------------------------------------------------------------------------------------------------
# Defects: bad inputs that do not yet end as documented (each test passes once the defect is fixed).


def standin_run(*argv: str) -> Scenario:
    def prepare(p: Project) -> Run:
        p.standin()
        return build(*argv)
    return prepare


VALIDATE = ("validate", "--preset", "control", "--endpoint", "http://127.0.0.1:9")


@pytest.mark.parametrize("argv", [("bake",), ("plan", "--dry-run"), ("--manifest", "a.yaml", "plan", "--manifest", "b.yaml")],
                         ids=["unknown-command", "unknown-option", "conflicting-sides"])
def test_a_usage_error_is_one_line_with_its_fix(argv: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outcome = execute(standin_run(*argv), tmp_path, monkeypatch)
    assert outcome.code == USAGE_EXIT
    assert len(outcome.err.splitlines()) == 1 and re.match(r"^error \([a-z ]+\): .+; fix: .+$", outcome.err), outcome.err


@pytest.mark.parametrize("extra", [("--rollback-on-failure",), ("--depths", "abc"), ("--pressure", "-1")],
                         ids=["rollback-without-deploy", "depths-not-numbers", "negative-pressure"])
def test_a_bad_validate_option_has_a_documented_kind_and_code(extra: tuple[str, ...], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    outcome = execute(standin_run(*VALIDATE, *extra), tmp_path, monkeypatch)
    match = KIND_LINE.match(outcome.err.strip())
    assert match and len(outcome.err.splitlines()) == 1, outcome.err
    assert match.group("kind") != KvbakeError.title and outcome.code not in (0, KvbakeError.exit_code), outcome.err


def test_config_out_on_a_file_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def prepare(p: Project) -> Run:
        p.standin().write("configs.txt", "not a folder\n")
        return build("config", "control", "--out", "configs.txt")

    outcome = execute(prepare, tmp_path, monkeypatch)
    assert outcome.code not in (0, KvbakeError.exit_code) and KIND_LINE.match(outcome.err.strip()), outcome.err
    assert outcome.after == outcome.before


@pytest.mark.parametrize("record", ["{half", "[]", '{"pinned": 5}', '{"pinned": "r/x@y@sha256:%s"}' % ("a" * 64),
                                    '{"pinned": "r/x@sha256:%s"}' % ("a" * 63)],
                         ids=["not-json", "a-list", "pinned-a-number", "pinned-two-at-signs", "pinned-short-digest"])
def test_a_corrupt_push_record_is_a_registry_error(record: str, tmp_path: Path) -> None:
    from kvbake.bake.core.plan import tag_for
    from kvbake.errors import RegistryError
    from kvbake.lock import read_lock
    from kvbake.manifest import load_manifest
    from kvbake.ship.core.push_record import PUSHES_DIR, pushed_image

    Project(tmp_path, contextlib.ExitStack()).standin()
    manifest = load_manifest(tmp_path / "manifest.yaml")
    lock = read_lock(manifest)
    tag = tag_for(manifest, lock)
    (tmp_path / PUSHES_DIR).mkdir(parents=True)
    (tmp_path / PUSHES_DIR / f"{tag}.json").write_text(record)
    with pytest.raises(RegistryError, match=f"push record of {re.escape(tag)}"):
        pushed_image(manifest, lock)
