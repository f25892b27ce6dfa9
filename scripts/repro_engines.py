"""Reproducibility across engine profiles: lock and build the stand-in on an engine of every profile this machine has
(plus a second, independently started containerd-store engine) and print one table row per engine.

    python scripts/repro_engines.py

Every engine gets the stand-in base by `docker save | docker load` from the default engine, so all hold the same
config. The lock must come out byte-identical on every profile (parent-directory metadata included), the config
digest must be the same everywhere, and each engine's own image ID must be the one kvbake predicted.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake.cli import main as kvbake  # noqa: E402
from kvbake.digests import sha256_hex  # noqa: E402
from kvbake.engines.adapters.client import Engine  # noqa: E402
from kvbake_rig.profile_engine import profile_engine  # noqa: E402
from kvbake_rig.recipes import available_recipes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BASE = "kvbake-standin/vllm-base:0.33.0"


def lock_and_build(folder: Path, capture: Path) -> tuple[str, dict]:
    project = folder / "standin"
    shutil.copytree(ROOT / "examples" / "standin", project, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = project / "manifest.yaml"
    if kvbake(["lock", "--manifest", str(manifest), "--rebase-base"]) != 0:  # this machine's own stand-in base
        raise SystemExit("lock failed")
    lock_sha = sha256_hex((project / "manifest.lock.json").read_bytes())
    with capture.open("w") as out:
        saved, sys.stdout = sys.stdout, out
        try:
            code = kvbake(["build", "--manifest", str(manifest), "--json"])
        finally:
            sys.stdout = saved
    if code != 0:
        raise SystemExit("build failed")
    return lock_sha, json.loads(capture.read_text())


def row(label: str, engine: Engine, folder: Path) -> str:
    lock_sha, built = lock_and_build(folder, folder / "build.json")
    profile = engine.profile()
    predicted = built["engine"]["id_meaning"]
    reported = engine.inspect_image(built["image"])["Id"]
    check = "yes" if reported == built["image_id"] else f"NO ({reported})"
    return (f"| {label} | {profile.server_version} | {profile.store} | {lock_sha[:16]} | {built['config_digest'][7:23]} | "
            f"{built['image_id'][7:23]} ({predicted}) | {check} |")


def main() -> int:
    names = sorted(available_recipes())
    engines = [(name, name) for name in names] + [(f"{name} (second engine)", name) for name in names if name.endswith("-containerd")][:1]
    print("| engine | Docker | store | lock sha256 | config digest | engine ID (meaning) | ID as predicted |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="kvbake-repro-") as tmp:
        for index, (label, name) in enumerate(engines):
            folder = Path(tmp) / str(index)
            folder.mkdir()
            with profile_engine(name, [BASE]) as engine:
                print(row(label, engine, folder), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
