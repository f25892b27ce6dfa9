"""List the engine profiles this machine can start (`--others`: only those besides the default engine's)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake_rig.recipes import available_recipes, other_profiles  # noqa: E402


def main(argv: list[str]) -> int:
    if argv[:1] == ["--others"]:
        from kvbake.engines.adapters.client import Engine

        print(" ".join(other_profiles(Engine().profile().name)))
        return 0
    for recipe in available_recipes().values():
        store = "containerd image store" if recipe.containerd_store else "classic store"
        print(f"engine profile {recipe.name}: {recipe.dockerd} ({store})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
