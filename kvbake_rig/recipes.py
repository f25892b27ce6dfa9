"""Engine recipes of the rig: which dockerd binaries this machine has, and how each profile is started."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kvbake.engines.adapters.manifestcache import cache_root
from kvbake.errors import EngineError

PRIVATE_DOCKER_VERSION = "26.1.5"
PROFILE_ENV = "KVBAKE_TEST_PROFILE"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class EngineRecipe:
    """How to start one engine profile: the dockerd binary, what goes first on its PATH, and its image store."""

    name: str
    dockerd: str
    path_prefix: tuple[str, ...]
    containerd_store: bool

    def env(self) -> dict[str, str]:
        """The dockerd's environment: its own containerd and shims first, then the system (whose runc it uses)."""
        return {**os.environ, "PATH": ":".join([*self.path_prefix, SYSTEM_PATH])}

    def daemon_json(self) -> str:
        return '{"features": {"containerd-snapshotter": true}}\n' if self.containerd_store else "{}\n"


def private_engine_root() -> Path:
    """Where setup unpacks Debian 13's docker.io and containerd on a Debian 12 machine."""
    return cache_root() / "engines" / f"docker-{PRIVATE_DOCKER_VERSION}" / "root"


def dockerd_version(dockerd: str, path_prefix: tuple[str, ...] = ()) -> tuple[int, int] | None:
    """`dockerd --version` → (major, minor), or None when it does not run."""
    env = {**os.environ, "PATH": ":".join([*path_prefix, SYSTEM_PATH])}
    try:
        out = subprocess.run([dockerd, "--version"], capture_output=True, text=True, check=False, env=env, timeout=30).stdout
    except OSError:
        return None
    found = re.search(r"version v?(\d+)\.(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _profiles_of(dockerd: str, prefix: tuple[str, ...]) -> list[EngineRecipe]:
    version = dockerd_version(dockerd, prefix)
    if version is None:
        return []
    base = f"docker-{version[0]}.{version[1]}"
    recipes = [EngineRecipe(f"{base}-classic", dockerd, prefix, False)]
    if version >= (24, 0):
        recipes.append(EngineRecipe(f"{base}-containerd", dockerd, prefix, True))
    return recipes


def available_recipes() -> dict[str, EngineRecipe]:
    """Every profile this machine can start: the system's dockerd, and a privately unpacked Docker 26 if present."""
    found: dict[str, EngineRecipe] = {}
    system = shutil.which("dockerd", path=SYSTEM_PATH)
    if system:
        found.update((r.name, r) for r in _profiles_of(system, ()))
    root = private_engine_root()
    private = root / "usr" / "sbin" / "dockerd"
    if private.is_file():
        prefix = (str(root / "usr" / "sbin"), str(root / "usr" / "bin"))
        for recipe in _profiles_of(str(private), prefix):
            found.setdefault(recipe.name, recipe)
    return found


def recipe_named(name: str) -> EngineRecipe:
    """One profile by name, or an error listing the ones this machine has."""
    recipes = available_recipes()
    if name not in recipes:
        raise EngineError(f"engine profile {name!r} is not available here (have: {', '.join(sorted(recipes)) or 'none'})",
                          "run bash scripts/setup.sh, which installs the engines of every profile")
    return recipes[name]


def selected_profile() -> EngineRecipe | None:
    """The profile a test run targets ($KVBAKE_TEST_PROFILE), or None for the machine's default engine."""
    name = os.environ.get(PROFILE_ENV, "").strip()
    return recipe_named(name) if name else None


def other_profiles(default: str) -> list[str]:
    """The profiles a test matrix adds to the default engine's, in a stable order."""
    return [name for name in sorted(available_recipes()) if name != default]

