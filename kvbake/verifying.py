"""`build.py verify [IMAGE] [--deep]`: check any local image against the manifest and lock."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import PurePosixPath

from kvbake.engine import Engine
from kvbake.errors import IntegrityError
from kvbake.extract import Extractor
from kvbake.lock import Lock
from kvbake.plan import Plan
from kvbake.provenance import switch_names
from kvbake.verify import Expectation, file_failures, image_failures, raise_if_failed

# Runs inside the image with its own python3; python3-minimal has no json module, so it speaks Python literals.
BYTECODE_PROOF = r"""
import importlib.machinery, importlib.util, os
report = {}
for path in PATHS:
    name = "kvbake_probe_" + os.path.basename(path)[:-3]
    loader = importlib.machinery.SourceFileLoader(name, path)
    running = loader.get_code(name)
    fresh = loader.source_to_code(loader.get_data(path), path)
    cached = importlib.util.cache_from_source(path)
    report[path] = {"patched_code_runs": running == fresh, "cached_bytecode": os.path.exists(cached)}
print(repr(report))
"""


@dataclass(frozen=True)
class VerifyReport:
    """What verify checked and found (it raises on any failure)."""

    image: str
    image_id: str
    deep: bool
    files_checked: int
    modules_proven: int
    python: bool
    config_digest: str = ""
    profile: str = ""


def expectation_for(plan: Plan, builder: str) -> Expectation:
    if builder == "docker":
        return Expectation(plan.lock.base.diff_ids, plan.image_labels(), switch_names(plan.manifest), None, None, max_new_layers=2)
    return Expectation(plan.lock.base.diff_ids, plan.image_labels(), switch_names(plan.manifest), plan.layer.diff_id, plan.image_id)


def verify_image(engine: Engine, plan: Plan, image: str, deep: bool, builder: str = "kvbake") -> VerifyReport:
    """Shallow checks always; deep reads the files back and proves the patched code is what Python runs."""
    inspect = engine.identify(image)
    if inspect is None:
        raise IntegrityError(f"image {image} is not present locally", "build it first (python build.py) or pass a local image")
    raise_if_failed(f"image {image}", image_failures(inspect, expectation_for(plan, builder)))
    if not deep:
        return VerifyReport(image, inspect["Id"], False, 0, 0, False, inspect["ConfigDigest"], engine.profile().name)
    files = read_back(engine, image, plan.lock)
    proven, has_python = prove_bytecode(engine, image, plan.lock)
    return VerifyReport(image, inspect["Id"], True, files, proven, has_python, inspect["ConfigDigest"], engine.profile().name)


def read_back(engine: Engine, image: str, lock: Lock) -> int:
    """Hash every chain file inside the image and check that no stale bytecode survived."""
    found: dict[str, str | None] = {}
    failures = []
    with engine.created_container(image) as container:
        extractor = Extractor(engine, container, lock.source_root)
        for locked in lock.files:
            item = extractor.file(locked.path)
            found[locked.path] = item.sha256 if item else None
            for pyc in locked.stale_bytecode:
                if extractor.file(pyc) is not None:
                    failures.append(f"stale bytecode {pyc} is still in the image")
    failures += file_failures(found, {f.path: f.overlay_sha256 for f in lock.files})
    raise_if_failed(f"deep check of {image}", failures)
    return len(found)


def prove_bytecode(engine: Engine, image: str, lock: Lock) -> tuple[int, bool]:
    """Run the image's own python3: the code it would execute for each module must equal the patched source."""
    modules = [str(PurePosixPath(lock.source_root) / f.path) for f in lock.files if f.path.endswith(".py")]
    script = BYTECODE_PROOF.replace("PATHS", repr(modules))
    output = engine.run_python(image, script)
    if output is None:
        return 0, False
    report = ast.literal_eval(output.strip().splitlines()[-1])
    failures = [f"{path}: the code Python would run is not the patched source" for path, r in sorted(report.items()) if not r["patched_code_runs"]]
    raise_if_failed(f"bytecode proof in {image}", failures)
    return len(report), True
