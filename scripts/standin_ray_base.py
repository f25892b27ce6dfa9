"""Build the Ray stand-in base locally: the vLLM stand-in base plus Python 3.11's whole stdlib and ray 2.60.0 pinned."""

# The rig's real-Ray serve shapes run this image: a Ray cluster of two nodes on loopback whose stop order kvbake's
# deploy is held to. The wheels are fetched, installed and compiled by scripts/standin_vllm_base.py's functions.

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from python_on_whales import DockerClient  # noqa: E402

import standin_lib as lib  # noqa: E402
from standin_base import phase  # noqa: E402
from standin_vllm_base import (  # noqa: E402
    SOURCE_DATE_EPOCH, Options, Pin, Recipe, Report, build_unless_current, compile_packages, fetch_wheels,
    install_packages, main, normalize_tree, normalized, parse_args, parse_requirements, pins_from_report, print_built,
    relock_fix, render_requirements, resolve,
)
from kvbake.errors import BaseImageError, IntegrityError, KvbakeError  # noqa: E402

RAY_VERSION = "2.60.0"
TOP_LEVEL = (f"ray=={RAY_VERSION}",)
BASE_TAG = lib.DEFAULT_TAG
DEFAULT_TAG = f"{BASE_TAG}-ray"
DEFAULT_CACHE_DIR = Path("~/.cache/kvbake/standin-ray")
SCRIPTS = Path(__file__).resolve().parent
REQUIREMENTS = SCRIPTS / "standin_ray_requirements.txt"
RECIPE = "1"  # bump when the way the image is made changes
# CPython 3.11 on manylinux x86_64 (the base's glibc is 2.36): the wheels pinned, downloaded and installed.
PLATFORM_ARGS = ("--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64", "--platform",
                 "manylinux1_x86_64", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311")
ARM_PLATFORM_ARGS = tuple(arg.replace("x86_64", "aarch64") for arg in PLATFORM_ARGS)  # only to tell if one exists
PIP_FIX = "check that PyPI is reachable, or place the wheels in the cache's wheels folder"
# The base has python3.11-minimal only. apt-get download resolves nothing, so this is the whole set the base lacks for
# libpython3.11-stdlib and python3.11 (asyncio, ssl's certificates path, multiprocessing, sqlite3, ctypes, readline...).
DEB_PACKAGES = (
    "python3.11", "libpython3.11-stdlib", "media-types", "libsqlite3-0", "libncursesw6", "libreadline8",
    "readline-common", "libnsl2", "libtirpc3", "libtirpc-common", "libgssapi-krb5-2", "libkrb5-3", "libk5crypto3",
    "libkrb5support0", "libkeyutils1",
)
DEBS_MOUNT = "/mnt"  # an empty folder of the base: mounting there leaves no trace in the committed layer
INSTALL_DEBS = (f"dpkg -i {DEBS_MOUNT}/*.deb && dpkg --audit"
                " && rm -rf /var/log/dpkg.log /var/log/alternatives.log /var/cache/debconf/*-old")
# Left out of ray: the Java workers' jar (the image has no JVM) and the dashboard's web client (served only by the
# dashboard's HTTP server, which needs ray[default]'s packages, not installed here).
PRUNED = ("ray/jars", "ray/dashboard/client/build")
# Runs inside the image with network none: the standard library modules the base lacked, the installed distributions,
# and which of them `ray`'s command line loads (every pinned one must be: none is there for nothing).
IMAGE_CHECK = """
import asyncio, ctypes, multiprocessing, sqlite3, ssl, sys
import importlib.metadata as metadata
import ray.scripts.scripts
owners = metadata.packages_distributions()
loaded = sorted({dist for name in list(sys.modules) for dist in owners.get(name.partition(".")[0], [])})
dists = {dist.metadata["Name"]: dist.version for dist in metadata.distributions(path=[sys.argv[1]])}
print(repr({"python": sys.version.split()[0], "ray": ray.__version__, "sqlite": sqlite3.sqlite_version,
            "openssl": ssl.OPENSSL_VERSION, "dists": dists, "loaded": loaded}))
"""


def aarch64_note(work: Path) -> str:
    """One header line saying whether the index also has ray's aarch64 wheel for CPython 3.11."""
    try:
        install = resolve(work, TOP_LEVEL, (*ARM_PLATFORM_ARGS, "--no-deps"), PIP_FIX)["install"]
    except KvbakeError:
        return f"# aarch64: the index has no ray {RAY_VERSION} wheel for CPython 3.11; only x86_64 is pinned.\n"
    url = install[0]["download_info"]["url"]
    sha256 = install[0]["download_info"]["archive_info"]["hashes"]["sha256"]
    return (f"# aarch64: {url.rsplit('/', 1)[-1]} (sha256:{sha256})\n"
            "# is on the index too; only x86_64 is pinned and built here.\n")


def relock(cache_dir: Path) -> list[Pin]:
    """Resolve ray afresh for CPython 3.11 x86_64 and write the requirements file."""
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix="relock-") as work:
        pins = pins_from_report(resolve(Path(work), TOP_LEVEL, PLATFORM_ARGS, PIP_FIX), excluded=())
        header = (f"# The Ray stand-in base: {TOP_LEVEL[0]} and its runtime dependencies (no extras: `ray start` loads "
                  "every one\n# of these and nothing more), for CPython 3.11 on manylinux x86_64, one wheel each.\n"
                  + aarch64_note(Path(work)) + "# Regenerate with: python scripts/standin_ray_base.py --relock\n")
    REQUIREMENTS.write_text(render_requirements(pins, header))
    return pins


def read_pins() -> list[Pin]:
    """The committed pins, or an error naming --relock."""
    if not REQUIREMENTS.is_file():
        raise KvbakeError(f"{REQUIREMENTS.name} is missing", fix=relock_fix(REQUIREMENTS))
    pins = parse_requirements(REQUIREMENTS.read_text(), REQUIREMENTS)
    if not any(normalized(pin.name) == "ray" and pin.version == RAY_VERSION for pin in pins):
        raise IntegrityError(f"{REQUIREMENTS.name} does not pin {TOP_LEVEL[0]}", fix=relock_fix(REQUIREMENTS))
    return pins


def requirements_sha256() -> str:
    return lib.file_sha256(REQUIREMENTS)


def debs_dir(cache_dir: Path) -> Path:
    """Where the .debs of DEB_PACKAGES are kept (fetch_debs.sh puts them in its debs/ folder)."""
    key = hashlib.sha256(json.dumps([lib.DEBIAN_SUITE, sorted(DEB_PACKAGES)]).encode()).hexdigest()[:12]
    return cache_dir / f"debs-{lib.DEBIAN_SUITE}-{key}"


def deb_version(path: Path) -> str:
    """The version in a .deb's file name (name_version_arch.deb, the epoch's colon written %3a)."""
    return urllib.parse.unquote(path.name.split("_")[1])


def fetch_debs(cache_dir: Path, mirror: str | None) -> list[Path]:
    """One .deb per package of DEB_PACKAGES, fetched with scripts/fetch_debs.sh when any is missing."""
    target = debs_dir(cache_dir)

    def found() -> dict[str, list[Path]]:
        return {name: sorted((target / "debs").glob(f"{name}_*.deb")) for name in DEB_PACKAGES}

    if any(len(paths) != 1 for paths in found().values()):
        env = {**os.environ, **({"KVBAKE_DEBIAN_MIRROR": mirror} if mirror else {})}
        command = ["bash", str(SCRIPTS / "fetch_debs.sh"), lib.DEBIAN_SUITE, str(target), *DEB_PACKAGES]
        result = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise KvbakeError(f"fetch_debs.sh could not fetch the Python 3.11 .debs: {last}",
                              fix="check the Debian mirror the apt sources name (or pass --mirror)")
    missing = [name for name, paths in found().items() if len(paths) != 1]
    if missing:
        raise IntegrityError(f"no single .deb for {', '.join(missing)} in {target / 'debs'}",
                             fix=f"delete {target} and run again")
    return [paths[0] for paths in found().values()]


def base_python_version(docker: DockerClient) -> str:
    """The Debian version of the base's python3.11-minimal."""
    output = docker.run(BASE_TAG, ["dpkg-query", "-W", "-f=${Version}", "python3.11-minimal"], networks=["none"],
                        remove=True, pull="never")
    return str(output).strip()


def stdlib_image(docker: DockerClient, debs: Sequence[Path], tag: str) -> str:
    """The base plus the .debs installed by dpkg (network none), committed as one layer; reused when present."""
    base_id = docker.image.inspect(BASE_TAG).id
    inputs = [base_id, *sorted(lib.file_sha256(deb) for deb in debs)]
    key = hashlib.sha256("\n".join(inputs).encode()).hexdigest()
    stdlib_tag = f"{tag.rsplit(':', 1)[0]}-stdlib:{key[:12]}"
    if docker.image.exists(stdlib_tag):
        return stdlib_tag
    python = next(deb for deb in debs if deb.name.startswith("python3.11_"))
    held = base_python_version(docker)
    if deb_version(python) != held:
        raise BaseImageError(f"the Debian mirror serves python3.11 {deb_version(python)}, {BASE_TAG} holds "
                             f"python3.11-minimal {held}",
                             fix="build the stand-in base from the current mirror (scripts/standin_base.py --rebuild "
                                 "after deleting its cached os-bookworm tar)")
    container = docker.run(BASE_TAG, ["sh", "-c", INSTALL_DEBS], volumes=[(str(debs[0].parent), DEBS_MOUNT, "ro")],
                           networks=["none"], detach=True, pull="never")
    try:
        code = docker.container.wait(container)
        if code != 0:
            last = (docker.container.logs(container).strip().splitlines() or ["no output"])[-1]
            raise IntegrityError(f"dpkg could not install the Python 3.11 .debs into {BASE_TAG} (exit {code}): "
                                 f"{last}", fix="compare DEB_PACKAGES with the dependency dpkg names")
        docker.container.commit(container, tag=stdlib_tag,
                                message="kvbake stand-in: Debian's Python 3.11 standard library (" +
                                        " ".join(deb.name for deb in debs) + ")")
    finally:
        docker.container.remove(container, force=True)
    return stdlib_tag


def prune(target: Path) -> None:
    """Remove the PRUNED folders of ray."""
    for relative in PRUNED:
        folder = target / relative
        if not folder.is_dir():
            raise IntegrityError(f"ray {RAY_VERSION} has no {relative} to leave out", fix="update PRUNED")
        shutil.rmtree(folder)


def write_console_script(target: Path, script: Path) -> None:
    """/usr/local/bin/ray as pip writes console scripts, for the image's /usr/bin/python3."""
    (dist,) = [dist for dist in importlib.metadata.distributions(path=[str(target)])
               if normalized(dist.metadata["Name"]) == "ray"]
    (entry,) = [entry for entry in dist.entry_points if entry.group == "console_scripts" and entry.name == "ray"]
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("#!/usr/bin/python3\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                      f"from {entry.module} import {entry.attr}\n"
                      "if __name__ == \"__main__\":\n"
                      "    sys.argv[0] = re.sub(r\"(-script\\.pyw|\\.exe)?$\", \"\", sys.argv[0])\n"
                      f"    sys.exit({entry.attr}())\n")
    script.chmod(0o755)


def settle(context: Path, target: Path, script: Path) -> None:
    """The folders above the packages and the script: mode 0755 and the staged files' one mtime."""
    staged = [*target.relative_to(context).parents, *script.relative_to(context).parents, script.relative_to(context)]
    for path in (context / relative for relative in staged if str(relative) != "."):
        path.chmod(0o755)
        os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))


def image_labels(stdlib_tag: str, base_id: str, debs: Sequence[Path]) -> dict[str, str]:
    """Labels that mark the image as the Ray stand-in and say what it holds."""
    return {
        lib.STANDIN_LABEL: "true",
        f"{lib.STANDIN_LABEL}.note": "Ray stand-in base for the kvbake examples; not a vLLM or Ray release image",
        f"{lib.STANDIN_LABEL}.ray-version": RAY_VERSION,
        f"{lib.STANDIN_LABEL}.ray-recipe": RECIPE,
        f"{lib.STANDIN_LABEL}.ray-requirements-sha256": requirements_sha256(),
        f"{lib.STANDIN_LABEL}.ray-pruned": ",".join(PRUNED),
        f"{lib.STANDIN_LABEL}.ray-base": BASE_TAG,
        f"{lib.STANDIN_LABEL}.ray-base-id": base_id,
        f"{lib.STANDIN_LABEL}.ray-stdlib-image": stdlib_tag,
        f"{lib.STANDIN_LABEL}.ray-deb-packages": ",".join(DEB_PACKAGES),
        f"{lib.STANDIN_LABEL}.ray-debs": " ".join(deb.name for deb in debs),
    }


def build_ray_layer(docker: DockerClient, stdlib_tag: str, wheels: Path, options: Options, labels: dict[str, str],
                    timings: dict[str, float]) -> None:
    """Stage ray and its dependencies, compile them in the image, and COPY them on top as one layer."""
    with tempfile.TemporaryDirectory(dir=options.cache_dir, prefix="context-") as work:
        context = Path(work)
        target = context / lib.SOURCE_ROOT.lstrip("/")
        with phase(timings, "install wheels"):
            install_packages(wheels, target, REQUIREMENTS, PLATFORM_ARGS, PIP_FIX)
            prune(target)
            normalize_tree(target)
            script = context / "usr/local/bin/ray"
            write_console_script(target, script)
            settle(context, target, script)
        with phase(timings, "compile"):
            compile_packages(docker, stdlib_tag, target)
            normalize_tree(target)  # the bytecode files and folders too: one mtime for the whole layer
        with phase(timings, "build ray layer"):
            (context / "Dockerfile").write_text(f"FROM {stdlib_tag}\nCOPY . /\nCMD [\"python3\"]\n")
            (context / ".dockerignore").write_text("Dockerfile\n.dockerignore\n")
            # `COPY . /`, not `COPY usr /usr`: the destination folder itself gets the build's time, and / is no entry
            # of the layer, so the layer is the same on every build from the same inputs.
            docker.legacy_build(context, tags=[options.tag], labels=labels, network="none", pull=False, cache=False)


def check_image(docker: DockerClient, tag: str, pins: Sequence[Pin]) -> dict[str, object]:
    """Fail unless the image has the whole standard library, exactly the pinned distributions, all loaded by ray."""
    output = docker.run(tag, ["python3", "-c", IMAGE_CHECK, lib.SOURCE_ROOT], networks=["none"], remove=True,
                        pull="never")
    result = ast.literal_eval(str(output).strip().splitlines()[-1])
    version = str(docker.run(tag, ["ray", "--version"], networks=["none"], remove=True, pull="never")).strip()
    expected = {normalized(pin.name): pin.version for pin in pins}
    held = {normalized(name): value for name, value in result["dists"].items()}
    unloaded = sorted(set(expected) - {normalized(name) for name in result["loaded"]})
    if held != expected or result["ray"] != RAY_VERSION or RAY_VERSION not in version or unloaded:
        found = json.dumps({**result, "cli": version, "unloaded": unloaded})
        raise IntegrityError(f"{tag}: image check failed: {found}",
                             fix="run again with --rebuild; if it persists, --relock")
    return {**result, "cli": version}


def up_to_date(docker: DockerClient, tag: str) -> bool:
    """True when the tag exists and was built by this recipe from the current requirements, .deb set and base."""
    if not docker.image.exists(tag) or not docker.image.exists(BASE_TAG):
        return False
    labels = docker.image.inspect(tag).config.labels or {}
    wanted = {"ray-recipe": RECIPE, "ray-requirements-sha256": requirements_sha256(), "ray-pruned": ",".join(PRUNED),
              "ray-deb-packages": ",".join(DEB_PACKAGES), "ray-base-id": docker.image.inspect(BASE_TAG).id}
    return all(labels.get(f"{lib.STANDIN_LABEL}.{key}") == value for key, value in wanted.items())


def build(options: Options, docker: DockerClient, pins: list[Pin], timings: dict[str, float]) -> Report:
    """Every phase of the build, in order."""
    started = time.monotonic()
    if not docker.image.exists(BASE_TAG):
        raise BaseImageError(f"{BASE_TAG} is not present locally", fix="run scripts/standin_base.py first")
    with phase(timings, "wheels"):
        wheels = fetch_wheels(options.cache_dir, pins, REQUIREMENTS, PLATFORM_ARGS, PIP_FIX)
    with phase(timings, "debs"):
        debs = fetch_debs(options.cache_dir, options.mirror)
    with phase(timings, "stdlib layer"):
        stdlib_tag = stdlib_image(docker, debs, options.tag)
    labels = image_labels(stdlib_tag, docker.image.inspect(BASE_TAG).id, debs)
    build_ray_layer(docker, stdlib_tag, wheels, options, labels, timings)
    with phase(timings, "check"):
        image_check = check_image(docker, options.tag, pins)
    image = docker.image.inspect(options.tag)
    return Report(tag=options.tag, image_id=image.id, layers=len(image.root_fs.layers), size_bytes=image.size,
                  timings=timings, image_check=image_check, wall_s=round(time.monotonic() - started, 1))


def print_report(report: Report) -> None:
    """A short human summary of the build."""
    check = report.image_check
    print_built(report, f"python {check['python']} (sqlite {check['sqlite']}, {check['openssl']}), {check['cli']}",
                f"distributions: {len(check['dists'])}, every one loaded by the ray command line")


def prepare_pins(options: Options, timings: dict[str, float]) -> list[Pin]:
    """The pins to build from: relocked first when asked."""
    if options.relock:
        with phase(timings, "relock"):
            print(f"wrote {REQUIREMENTS.name}: {len(relock(options.cache_dir))} pinned distributions")
    return read_pins()


def run(options: Options) -> int:
    """Build the Ray stand-in base unless it is current."""
    return build_unless_current(options, Recipe("the Ray stand-in", prepare_pins,
                                                lambda docker, options: up_to_date(docker, options.tag), build, print_report))


def parse_ray_args(argv: Sequence[str] | None) -> Options:
    return parse_args(argv, __doc__, DEFAULT_TAG, DEFAULT_CACHE_DIR, TOP_LEVEL, REQUIREMENTS)


if __name__ == "__main__":
    sys.exit(main(None, parse_ray_args, run))
