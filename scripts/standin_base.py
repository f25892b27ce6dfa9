"""Build the stand-in base image locally: Debian bookworm + Python 3.11 + a real vLLM release's sources and exllamav3's,
in two layers."""

from __future__ import annotations

import argparse
import ast
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from python_on_whales import DockerClient  # noqa: E402
from python_on_whales.exceptions import DockerException  # noqa: E402

import standin_lib as lib  # noqa: E402
from kvbake.errors import EngineError, IntegrityError, KvbakeError, ResourceError  # noqa: E402

SOURCES = "sources"  # the build context's folder holding every package, copied into the source root as one layer
OS_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Runs inside the image, whose python3-minimal has no json: it prints a dict literal.
PYC_CHECK = """
import importlib.util, os, struct, sys
roots = sys.argv[1:]
root = roots[0]
total, stale = 0, []
for folder, _, names in (entry for top in roots for entry in os.walk(top)):
    for name in names:
        if not name.endswith(".py"):
            continue
        source = os.path.join(folder, name)
        total += 1
        try:
            with open(importlib.util.cache_from_source(source), "rb") as handle:
                head = handle.read(16)
        except OSError:
            stale.append(source)
            continue
        flags, mtime, size = struct.unpack("<3I", head[4:16])
        info = os.stat(source)
        expected = (importlib.util.MAGIC_NUMBER, 0, int(info.st_mtime) & 0xFFFFFFFF, info.st_size & 0xFFFFFFFF)
        if (head[:4], flags, mtime, size) != expected:
            stale.append(source)
print(repr({"python": sys.version.split()[0], "on_path": os.path.dirname(root) in sys.path,
            "modules": total, "stale": stale[:5], "stale_count": len(stale)}))
"""


@dataclass(frozen=True)
class Options:
    """What the command line asked for."""

    tag: str
    cache_dir: Path
    rebuild: bool
    mirror: str | None
    version: str = lib.VLLM_VERSION


@dataclass(frozen=True)
class Report:
    """What was built, how big it is, and how long each phase took."""

    tag: str
    image_id: str
    layers: int
    size_bytes: int
    timings: dict[str, float]
    pyc_check: dict[str, object]


def parse_args(argv: Sequence[str] | None) -> Options:
    """Turn argv into Options."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vllm-version", choices=list(lib.RELEASES), default=lib.VLLM_VERSION,
                        help="the vLLM release whose sources the base holds (default: %(default)s, the example's base)")
    parser.add_argument("--tag", default=None, help="image tag to build (default: kvbake-standin/vllm-base:<version>)")
    parser.add_argument("--cache-dir", type=Path, default=lib.DEFAULT_CACHE_DIR,
                        help="where the wheel and the OS tar are kept (default: %(default)s)")
    parser.add_argument("--rebuild", action="store_true", help="build even if the tag exists")
    parser.add_argument("--mirror", default=None,
                        help="Debian mirror for debootstrap (default: the one apt is configured with)")
    args = parser.parse_args(argv)
    return Options(tag=args.tag or lib.tag_for(args.vllm_version), cache_dir=args.cache_dir.expanduser(), rebuild=args.rebuild,
                   mirror=args.mirror, version=args.vllm_version)


def require_tool(name: str, package: str) -> str:
    """The path of a command-line tool, or a one-line error naming the apt package."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if not found:
        raise KvbakeError(f"{name} is not installed", fix=f"apt-get install -y {package}")
    return found


def connect_engine() -> DockerClient:
    """A client for the default engine, checked to answer."""
    require_tool("docker", "docker.io")
    docker = DockerClient()
    try:
        docker.system.info()
    except DockerException as err:
        raise EngineError("the docker engine does not answer", fix="start dockerd and run again") from err
    return docker


@contextmanager
def phase(timings: dict[str, float], name: str) -> Iterator[None]:
    """Time one named phase and announce it."""
    print(f"-- {name}", flush=True)
    start = time.monotonic()
    yield
    timings[name] = round(time.monotonic() - start, 1)


def fetch_wheel(cache_dir: Path, pin: lib.WheelPin) -> Path:
    """The pinned wheel from the cache, downloaded with pip when absent."""
    folder = cache_dir / "wheels"
    wheel = folder / pin.filename
    if not wheel.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   f"vllm=={pin.version}", "-d", str(folder), "--quiet"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not wheel.is_file():
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise KvbakeError(f"pip could not download vllm=={pin.version}: {last}",
                              fix="check that PyPI is reachable, or place the wheel in " + str(folder))
    lib.check_wheel(wheel, pin)
    return wheel


def fetch_package_wheel(cache_dir: Path, package: lib.PurePackage = lib.EXLLAMAV3) -> Path:
    """The pinned pure-Python wheel of a package every stand-in base holds, from the cache or pip."""
    pin = lib.WheelPin(arch="any", filename=package.filename, sha256=package.wheel_sha256, version=package.version)
    wheel = cache_dir / "wheels" / package.filename
    if not wheel.is_file():
        wheel.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   f"{package.name}=={package.version}", "-d", str(wheel.parent), "--quiet"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not wheel.is_file():
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise KvbakeError(f"pip could not download {package.name}=={package.version}: {last}",
                              fix="check that PyPI is reachable, or place the wheel in " + str(wheel.parent))
    lib.check_wheel(wheel, pin)
    return wheel


def bootstrap_rootfs(rootfs: Path, mirror: str | None) -> None:
    """Run debootstrap for a minimal bookworm with python3-minimal."""
    debootstrap = require_tool("debootstrap", "debootstrap")
    command = [debootstrap, "--variant=minbase", "--include=python3-minimal", lib.DEBIAN_SUITE, str(rootfs)]
    if mirror:
        command.append(mirror)
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stdout.strip().splitlines() or ["no output"])[-1]
        raise KvbakeError(f"debootstrap failed: {last}", fix="check the Debian mirror and that you run as root")


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below folder, deepest first (debootstrap leaves /proc mounted on failure)."""
    prefix = str(folder.resolve())
    points = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    inside = [point for point in points if point == prefix or point.startswith(prefix + "/")]
    return sorted(inside, key=len, reverse=True)


@contextmanager
def scratch_rootfs(cache_dir: Path) -> Iterator[Path]:
    """A fresh rootfs folder that is unmounted, then removed, on exit; kept if a mount remains."""
    work = Path(tempfile.mkdtemp(dir=cache_dir, prefix="rootfs-"))
    try:
        yield work / "rootfs"
    finally:
        for point in mounts_under(work):
            subprocess.run(["umount", "--lazy", point], check=False)
        left = mounts_under(work)
        if left:
            print(f"warning: {work} kept because {left[0]} is still mounted", file=sys.stderr)
        else:
            shutil.rmtree(work)


def os_tar_path(options: Options, arch: str) -> Path:
    """Where the OS rootfs tar of an architecture is cached."""
    return options.cache_dir / f"os-{lib.DEBIAN_SUITE}-{arch}.tar"


def require_bootstrap_tools() -> None:
    """Fail early when the OS tar must be made but debootstrap or root is missing."""
    require_tool("debootstrap", "debootstrap")
    require_tool("tar", "tar")
    if os.geteuid() != 0:
        raise KvbakeError("debootstrap must run as root to make the OS tar",
                          fix="run this script as root, or copy a cached OS tar into --cache-dir")


def os_tar(options: Options, arch: str) -> Path:
    """The cached OS rootfs tar, made with debootstrap when absent."""
    tar_path = os_tar_path(options, arch)
    if tar_path.is_file():
        return tar_path
    mirror = options.mirror or lib.debian_mirror(lib.read_apt_sources())
    options.cache_dir.mkdir(parents=True, exist_ok=True)
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
                         message="kvbake stand-in: debootstrap bookworm minbase + python3-minimal")
    return os_tag


def stage_sources(wheel_path: Path, context: Path, version: str = lib.VLLM_VERSION, package_wheel: Path | None = None) -> int:
    """Extract every vllm/**.py of the wheel (and exllamav3/**.py of its wheel) into the build context; checks the pinned
    tree hashes."""
    with zipfile.ZipFile(wheel_path) as wheel:
        lib.check_tree(wheel, version)
        names = lib.python_members(wheel)
        lib.extract_members(wheel, names, context / SOURCES)
    if package_wheel is not None:
        with zipfile.ZipFile(package_wheel) as wheel:
            lib.check_package_tree(wheel)
            extra = lib.python_members(wheel, lib.EXLLAMAV3.name)
            lib.extract_members(wheel, extra, context / SOURCES)
            names += extra
    for package in lib.PACKAGES:
        if (context / SOURCES / package).is_dir():
            for folder in [context / SOURCES / package, *(p for p in (context / SOURCES / package).rglob("*") if p.is_dir())]:
                folder.chmod(0o755)
    return len(names)


def compile_sources(docker: DockerClient, os_tag: str, context: Path) -> None:
    """Byte-compile the sources at their final paths with the image's own interpreter."""
    targets = [f"{lib.SOURCE_ROOT}/{package}" for package in lib.PACKAGES]
    # No -j: python3-minimal lacks concurrent.futures. Timestamp pycs, as pip writes them.
    command = ["python3", "-m", "compileall", "-q", "--invalidation-mode", "timestamp", *targets]
    docker.run(os_tag, command, volumes=[(str(context / SOURCES / package), target) for package, target in zip(lib.PACKAGES, targets)],
               networks=["none"], remove=True, pull="never")


def write_dockerfile(context: Path, os_tag: str) -> None:
    """A Dockerfile that adds the sources (every package) as one layer on top of the OS image."""
    (context / "Dockerfile").write_text(
        f"FROM {os_tag}\n"
        f"COPY {SOURCES}/ {lib.SOURCE_ROOT}/\n"
    )
    (context / ".dockerignore").write_text("Dockerfile\n.dockerignore\n")


def image_labels(pin: lib.WheelPin) -> dict[str, str]:
    """Labels that mark the image as the stand-in and say what it holds."""
    return {
        lib.STANDIN_LABEL: "true",
        f"{lib.STANDIN_LABEL}.note": "stand-in base for the kvbake example; not a vLLM release image",
        f"{lib.STANDIN_LABEL}.vllm-version": pin.version,
        f"{lib.STANDIN_LABEL}.wheel-sha256": pin.sha256,
        f"{lib.STANDIN_LABEL}.py-tree-sha256": lib.RELEASES[pin.version].tree_sha256,
        f"{lib.STANDIN_LABEL}.exllamav3-version": lib.EXLLAMAV3.version,
        f"{lib.STANDIN_LABEL}.exllamav3-tree-sha256": lib.EXLLAMAV3.tree_sha256,
        f"{lib.STANDIN_LABEL}.recipe": lib.recipe(pin.version),
        f"{lib.STANDIN_LABEL}.source-root": lib.SOURCE_ROOT,
        f"{lib.STANDIN_LABEL}.debian-suite": lib.DEBIAN_SUITE,
    }


def build_sources_layer(docker: DockerClient, os_tag: str, wheel: Path, options: Options,
                        pin: lib.WheelPin, timings: dict[str, float], package_wheel: Path | None = None) -> None:
    """Stage, compile and COPY the vLLM sources on top of the OS image."""
    with tempfile.TemporaryDirectory(dir=options.cache_dir, prefix="context-") as work:
        context = Path(work)
        with phase(timings, "stage sources"):
            stage_sources(wheel, context, pin.version, package_wheel)
        with phase(timings, "compile"):
            compile_sources(docker, os_tag, context)
        with phase(timings, "build sources layer"):
            write_dockerfile(context, os_tag)
            docker.legacy_build(context, tags=[options.tag], labels=image_labels(pin),
                                network="none", pull=False, cache=False)


def check_image(docker: DockerClient, tag: str, version: str = lib.VLLM_VERSION) -> dict[str, object]:
    """Fail unless the image has two or more layers and every module has bytecode Python will use."""
    layers = docker.image.inspect(tag).root_fs.layers
    if len(layers) < 2:
        raise IntegrityError(f"{tag} has {len(layers)} layer(s), expected at least 2")
    output = docker.run(tag, ["python3", "-c", PYC_CHECK, *(f"{lib.SOURCE_ROOT}/{p}" for p in lib.PACKAGES)],
                        networks=["none"], remove=True, pull="never")
    result = ast.literal_eval(str(output).strip().splitlines()[-1])
    expected = lib.RELEASES[version].file_count + lib.EXLLAMAV3.file_count
    if result["stale_count"] or result["modules"] != expected or not result["on_path"]:
        raise IntegrityError(f"{tag}: bytecode check failed: {json.dumps(result)}")
    return result


def build(options: Options, docker: DockerClient) -> Report:
    """Every phase of the build, in order."""
    timings: dict[str, float] = {}
    pin = lib.wheel_pin(lib.host_arch(), options.version)
    options.cache_dir.mkdir(parents=True, exist_ok=True)
    if not os_tar_path(options, pin.arch).is_file():
        require_bootstrap_tools()
    with phase(timings, "wheel"):
        wheel = fetch_wheel(options.cache_dir, pin)
        package_wheel = fetch_package_wheel(options.cache_dir)
    with phase(timings, "os rootfs tar"):
        tar_path = os_tar(options, pin.arch)
    with phase(timings, "os layer"):
        os_tag = os_image(docker, tar_path, options.tag)
    build_sources_layer(docker, os_tag, wheel, options, pin, timings, package_wheel)
    with phase(timings, "check"):
        pyc_check = check_image(docker, options.tag, options.version)
    image = docker.image.inspect(options.tag)
    return Report(tag=options.tag, image_id=image.id, layers=len(image.root_fs.layers),
                  size_bytes=image.size, timings=timings, pyc_check=pyc_check)


def print_report(report: Report) -> None:
    """A short human summary of the build."""
    total = sum(report.timings.values())
    print(f"built {report.tag} ({report.image_id[:19]})")
    print(f"  layers: {report.layers}, size: {report.size_bytes / 1e6:.0f} MB")
    print(f"  modules with valid bytecode: {report.pyc_check['modules']} (python {report.pyc_check['python']})")
    print("  timings: " + ", ".join(f"{name} {secs}s" for name, secs in report.timings.items())
          + f"; total {total:.1f}s")


def run(options: Options) -> int:
    """Build unless the tag is already present (or --rebuild)."""
    docker = connect_engine()
    if docker.image.exists(options.tag) and not options.rebuild:
        held = (docker.image.inspect(options.tag).config.labels or {}).get(f"{lib.STANDIN_LABEL}.recipe")
        if held == lib.recipe(options.version):
            print(f"{options.tag} already exists locally; nothing to do (use --rebuild to build again)")
            return 0
        print(f"{options.tag} exists but was built from another recipe ({held or 'none recorded'}); building it again")
    try:
        report = build(options, docker)
    except DockerException as err:
        detail = (err.stderr or err.stdout or "").strip().splitlines() or [f"exit code {err.return_code}"]
        raise EngineError(f"engine call failed: {' '.join(err.docker_command[1:4])} ...: {detail[-1]}") from err
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise ResourceError(f"no space left while writing under {options.cache_dir}",
                                fix="free disk space or pass --cache-dir on a larger disk") from err
        raise
    print_report(report)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run, and turn expected failures into one line and an exit code."""
    options = parse_args(argv)
    try:
        return run(options)
    except KvbakeError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
