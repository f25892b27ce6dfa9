"""`build.py verify [IMAGE] [--deep]`: check any local image against the manifest and lock."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kvbake.bake.adapters.extract import BaseFile, Extractor, stale_bytecode_names
from kvbake.bake.core.bytecode import PYC_HEADER, ModuleEvidence, module_failures, python_tags, shadow_candidates
from kvbake.bake.core.image_checks import Expectation, file_failures, image_failures, platform_of, raise_if_failed
from kvbake.bake.core.plan import Plan
from kvbake.bake.core.provenance import switch_names
from kvbake.engines.adapters.client import Engine
from kvbake.errors import IntegrityError
from kvbake.lock import Lock, LockedFile

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
    offline_proven: int = 0
    image_platform: str = ""
    interpreter_ran: bool = False

    def proofs(self) -> str:
        """Which bytecode proofs ran, in words."""
        text = f"offline proof: {self.offline_proven} modules, no cached bytecode or shadowing module can win"
        if self.python:
            return text + f"; interpreter proof: {self.modules_proven} modules run their patched code"
        if not self.interpreter_ran:
            return text + f"; interpreter proof skipped: the image is {self.image_platform} and this engine cannot run it"
        return text + "; interpreter proof skipped: no python3 in the image"


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
    # A kvbake-built image is exactly the locked base plus the thin layer (checked above), and lock refuses a base
    # where anything shadows a patched module; other builders' layers are unknown, so their shadows are looked for.
    files, offline = read_back(engine, image, plan.lock, check_shadows=builder != "kvbake")
    image_platform = platform_of(inspect)
    runnable = engine_can_run(engine, image_platform)
    proven, has_python = prove_bytecode(engine, image, plan.lock) if runnable else (0, False)
    return VerifyReport(image, inspect["Id"], True, files, proven, has_python, inspect["ConfigDigest"], engine.profile().name,
                        offline, image_platform, runnable)


def engine_can_run(engine: Engine, image_platform: str) -> bool:
    """The image's own interpreter runs only on its platform (or where the kernel has an emulator registered for it)."""
    facts = engine.ping()
    if image_platform == f"{facts.get('os_type')}/{normalised_arch(str(facts.get('architecture')))}":
        return True
    return emulator_registered(image_platform.split("/")[-1])


def normalised_arch(machine: str) -> str:
    """`docker info` reports the kernel's machine name; images use GOARCH names."""
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}.get(machine, machine)


def emulator_registered(architecture: str) -> bool:
    qemu = {"arm64": "aarch64", "amd64": "x86_64"}.get(architecture, architecture)  # the others share their name
    entry = Path(f"/proc/sys/fs/binfmt_misc/qemu-{qemu}")
    try:
        return entry.read_text().startswith("enabled")
    except OSError:
        return False


def module_evidence(extractor: Extractor, locked: LockedFile, item: BaseFile, lock: Lock, check_shadows: bool) -> ModuleEvidence:
    """The module's baked source, the headers of any pyc of it in __pycache__, and whatever would shadow it."""
    cache_dir = str(PurePosixPath(locked.path).parent / "__pycache__")
    headers = {}
    for name in stale_bytecode_names(locked.path, extractor.listing(cache_dir) or []):  # listing: once per folder
        pyc = extractor.file(f"{cache_dir}/{name}")
        if pyc is not None:
            headers[name] = pyc.data[:PYC_HEADER]
    candidates = shadow_candidates(locked.path, python_tags(locked.stale_bytecode), lock.base.platform.split("/")[-1]) if check_shadows else ()
    shadows = tuple(c for c in candidates if extractor.file(c) is not None)
    return ModuleEvidence(locked.path, item.data, item.mtime, headers, shadows)


def read_back(engine: Engine, image: str, lock: Lock, check_shadows: bool) -> tuple[int, int]:
    """Hash every chain file inside the image, check that no stale bytecode survived, and prove offline, from the pyc
    headers and the files beside each module, that only the patched source can run. Returns (files, modules proven)."""
    found: dict[str, str | None] = {}
    failures = []
    proven = 0
    with engine.created_container(image) as container:
        extractor = Extractor(engine, container, lock.source_root)
        for locked in lock.files:
            item = extractor.file(locked.path)
            found[locked.path] = item.sha256 if item else None
            for pyc in locked.stale_bytecode:  # any entry of the name fails, not only a regular file
                if extractor.present(pyc):
                    failures.append(f"stale bytecode {pyc} is still in the image")
            if item is not None and locked.path.endswith(".py"):
                failures += module_failures(module_evidence(extractor, locked, item, lock, check_shadows))
                proven += 1
    failures += file_failures(found, {f.path: f.overlay_sha256 for f in lock.files})
    raise_if_failed(f"deep check of {image}", failures)
    return len(found), proven


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
