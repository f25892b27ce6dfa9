"""Build the linux/arm64 stand-in base on any host, with no emulation: debootstrap --foreign, dpkg -x, host-compiled
bytecode, and an image config written here, loaded as a `docker load` archive (so the config digest is the same on
every engine)."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import standin_lib as lib  # noqa: E402
from standin_base import connect_engine, fetch_package_wheel, fetch_wheel, mounts_under, require_bootstrap_tools, require_tool  # noqa: E402
from kvbake.digests import canonical_json, sha256_digest  # noqa: E402
from kvbake.errors import KvbakeError  # noqa: E402

ARCH = "arm64"
DEFAULT_TAG = f"{lib.DEFAULT_TAG}-arm64"
EPOCH = 1_700_000_000  # the sources layer's directories, bytecode files and the config's created time
CREATED = "2023-11-14T22:13:20Z"


def os_tar(cache_dir: Path, mirror: str | None) -> Path:
    """The arm64 OS tar: debootstrap's first stage only (it runs nothing), then every downloaded .deb unpacked."""
    target = cache_dir / f"os-{lib.DEBIAN_SUITE}-{ARCH}-foreign.tar"
    if target.is_file():
        return target
    require_bootstrap_tools()
    mirror = mirror or lib.debian_mirror(lib.read_apt_sources())
    work = Path(tempfile.mkdtemp(dir=cache_dir, prefix="rootfs-arm64-"))
    rootfs = work / "rootfs"
    try:
        command = [require_tool("debootstrap", "debootstrap"), "--foreign", f"--arch={ARCH}", "--variant=minbase",
                   "--include=python3-minimal", lib.DEBIAN_SUITE, str(rootfs)] + ([mirror] if mirror else [])
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise KvbakeError(f"debootstrap --foreign failed: {(result.stdout.strip().splitlines() or ['no output'])[-1]}",
                              fix="check the Debian mirror and that you run as root")
        for deb in sorted((rootfs / "var" / "cache" / "apt" / "archives").glob("*.deb")):
            subprocess.run(["dpkg", "-x", str(deb), str(rootfs)], check=True)
        partial = target.with_suffix(".tar.partial")
        excludes = [f"--exclude={pattern}" for pattern in lib.OS_TAR_EXCLUDES]
        subprocess.run(["tar", "--numeric-owner", "--xattrs", "--sort=name", *excludes, "-C", str(rootfs), "-cf", str(partial), "."], check=True)
        partial.rename(target)
    finally:
        for point in mounts_under(work):
            subprocess.run(["umount", "--lazy", point], check=False)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return target


def _directory(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, EPOCH
    tar.addfile(info)


def sources_layer(wheel_path: Path, work: Path, package_wheel: Path) -> Path:
    """The vLLM and exllamav3 sources at the source root, with timestamp bytecode compiled by this host's Python 3.11."""
    if sys.version_info[:2] != (3, 11):
        raise KvbakeError(f"the arm64 stand-in's bytecode must come from Python 3.11, this is {sys.version.split()[0]}",
                          fix="run this script with the project's .venv/bin/python (Python 3.11)")
    with zipfile.ZipFile(wheel_path) as wheel:
        lib.check_tree(wheel)
        lib.extract_members(wheel, lib.python_members(wheel), work)
    with zipfile.ZipFile(package_wheel) as wheel:
        lib.check_package_tree(wheel)
        lib.extract_members(wheel, lib.python_members(wheel, lib.EXLLAMAV3.name), work)
    for package in lib.PACKAGES:
        final = f"{lib.SOURCE_ROOT}/{package}"
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-d", final, "--invalidation-mode", "timestamp", str(work / package)],
                       check=True)
    layer = work.parent / "sources.tar"
    prefix = lib.SOURCE_ROOT.strip("/")
    with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
        parts = prefix.split("/")
        for depth in range(1, len(parts) + 1):
            _directory(tar, "/".join(parts[:depth]))
        staged = [path for package in lib.PACKAGES for path in work.joinpath(package).rglob("*")]
        for package in lib.PACKAGES:
            _directory(tar, f"{prefix}/{package}")
        for path in sorted(staged, key=lambda p: p.relative_to(work).as_posix()):
            name = f"{prefix}/{path.relative_to(work).as_posix()}"
            if path.is_dir():
                _directory(tar, name)
                continue
            info = tarfile.TarInfo(name)
            data = path.read_bytes()
            info.size, info.mode = len(data), 0o644
            info.mtime = int(path.stat().st_mtime) if path.suffix == ".py" else EPOCH
            tar.addfile(info, io.BytesIO(data))
    if not set(lib.PACKAGES) <= set(os.listdir(work)):
        raise KvbakeError("the vllm and exllamav3 sources were not both staged", fix="check the wheels")
    return layer


def file_digest(path: Path) -> str:
    return "sha256:" + lib.file_sha256(path)


def image_config(diff_ids: list[str], wheel_sha256: str) -> bytes:
    labels = {lib.STANDIN_LABEL: "true", f"{lib.STANDIN_LABEL}.note": "arm64 stand-in base for the kvbake example; not a vLLM release image",
              f"{lib.STANDIN_LABEL}.vllm-version": lib.VLLM_VERSION, f"{lib.STANDIN_LABEL}.wheel-sha256": wheel_sha256,
              f"{lib.STANDIN_LABEL}.py-tree-sha256": lib.PY_TREE_SHA256, f"{lib.STANDIN_LABEL}.source-root": lib.SOURCE_ROOT,
              f"{lib.STANDIN_LABEL}.debian-suite": lib.DEBIAN_SUITE, f"{lib.STANDIN_LABEL}.built-without-emulation": "true",
              f"{lib.STANDIN_LABEL}.exllamav3-version": lib.EXLLAMAV3.version,
              f"{lib.STANDIN_LABEL}.exllamav3-tree-sha256": lib.EXLLAMAV3.tree_sha256, f"{lib.STANDIN_LABEL}.recipe": lib.recipe(lib.VLLM_VERSION)}
    return canonical_json({
        "architecture": ARCH, "os": "linux", "created": CREATED,
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"],
                   "Cmd": ["python3"], "Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": CREATED, "created_by": "kvbake stand-in: debootstrap --foreign bookworm minbase + python3-minimal (arm64)"},
                    {"created": CREATED, "created_by": "kvbake stand-in: vLLM 0.33.0 and exllamav3 1.6.5 sources with Python 3.11 bytecode"}],
    })


def load_archive(layers: list[Path], config: bytes, tag: str, work: Path) -> Path:
    archive = work / "image.tar"
    config_name = sha256_digest(config).split(":")[1] + ".json"
    names = [f"layer{index}.tar" for index in range(len(layers))]
    with tarfile.open(archive, "w") as tar:
        for name, layer in zip(names, layers):
            tar.add(layer, arcname=name)
        for name, data in ((config_name, config), ("manifest.json", json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": names}]).encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), EPOCH
            tar.addfile(info, io.BytesIO(data))
    return archive


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tag", default=DEFAULT_TAG)
    parser.add_argument("--cache-dir", type=Path, default=lib.DEFAULT_CACHE_DIR)
    parser.add_argument("--mirror", default=None)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args(argv)
    try:
        docker = connect_engine()
        if docker.image.exists(args.tag) and not args.rebuild:
            held = (docker.image.inspect(args.tag).config.labels or {}).get(f"{lib.STANDIN_LABEL}.recipe")
            if held == lib.recipe(lib.VLLM_VERSION):
                print(f"{args.tag} already exists locally; nothing to do (use --rebuild to build again)")
                return 0
            print(f"{args.tag} exists but was built from another recipe ({held or 'none recorded'}); building it again")
        cache_dir = args.cache_dir.expanduser()
        cache_dir.mkdir(parents=True, exist_ok=True)
        pin = lib.wheel_pin(lib.host_arch())  # the .py tree is the same in every architecture's wheel
        wheel = fetch_wheel(cache_dir, pin)
        package_wheel = fetch_package_wheel(cache_dir)
        os_layer = os_tar(cache_dir, args.mirror)
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix="arm64-") as tmp:
            staged = Path(tmp) / "context"
            staged.mkdir()
            sources = sources_layer(wheel, staged, package_wheel)
            config = image_config([file_digest(os_layer), file_digest(sources)], pin.sha256)
            docker.image.load(load_archive([os_layer, sources], config, args.tag, Path(tmp)))
        image = docker.image.inspect(args.tag)
        print(f"built {args.tag} ({image.id[:19]}, {image.os}/{image.architecture}, {image.size / 1e6:.0f} MB, config {sha256_digest(config)[:19]})")
        return 0
    except KvbakeError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
