"""`build.py build`: check the base, extract, patch, compare, assemble, load, verify, tag and record."""

from __future__ import annotations

import errno
import logging
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from kvbake.bake.adapters.extract import Extractor
from kvbake.bake.adapters.gitapply import GitApplier
from kvbake.bake.adapters.pinning import check_switch_coverage
from kvbake.bake.core.chain import apply_chain
from kvbake.bake.core.derived_image import archive_members, oci_layout_members, write_archive
from kvbake.bake.core.dockerfile import render
from kvbake.bake.core.image_checks import Expectation, base_failures, image_failures, moved_tag, raise_if_failed
from kvbake.bake.core.plan import Plan, check_plan_matches_lock, compare_three_ways, layer_files, make_plan, read_overlay
from kvbake.bake.core.provenance import switch_names
from kvbake.engines.adapters import manifestcache
from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.containerd import StoreManifest, derived_store_manifest, thin_blob
from kvbake.engines.core.detection import STORE_CHECK, EngineProfile
from kvbake.engines.core.identity import ExpectedId, expected_id
from kvbake.errors import BaseImageError, IntegrityError, ResourceError
from kvbake.lock import Lock, read_lock
from kvbake.manifest import Manifest

log = logging.getLogger(__name__)
DOCKER_BUILDER_SUFFIX = "-dockerbuild"


def plan_tree(plan: Plan) -> dict[str, bytes]:
    """The patched bytes back out of the plan's layer files, keyed by source-relative path."""
    return dict(plan.tree)


@dataclass
class Timings:
    """Seconds per named phase, in order."""

    phases: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        log.info("phase %s", name)
        try:
            yield
        finally:
            self.phases[name] = round(time.perf_counter() - start, 3)


@dataclass(frozen=True)
class BuiltImage:
    """A loaded, verified and tagged derived image: its identity (config digest) and the ID this engine reports."""

    plan: Plan
    image_id: str
    reference: str
    archive_bytes: int
    timings: dict[str, float]
    expected: ExpectedId | None = None

    @property
    def config_digest(self) -> str:
        return self.plan.image_id


@dataclass(frozen=True)
class BaseOnEngine:
    """The locked base as this engine holds it: the profile, and on the containerd store its manifest."""

    profile: EngineProfile
    store_manifest: StoreManifest | None
    image_id: str


@dataclass(frozen=True)
class LoadUnit:
    """What to load into this engine's store, and the ID it must then report."""

    members: list[tuple[str, bytes]]
    expected: ExpectedId


def check_base(engine: Engine, manifest: Manifest, lock: Lock) -> BaseOnEngine:
    """The base must be local and be the locked one: config digest, diff_ids and platform, however the store names it."""
    inspect = engine.require_image(manifest.base.image)
    profile = engine.profile()
    inspect["ConfigDigest"] = engine.config_digest_of(inspect, manifest.base.image)
    if manifest.base.image == lock.base.reference and inspect["ConfigDigest"] != lock.base.config_digest:
        raise BaseImageError(*moved_tag(manifest.base.image, inspect["ConfigDigest"], lock.base.config_digest))
    failures = base_failures(inspect, lock.base.config_digest, lock.base.diff_ids, lock.base.platform)
    if failures:
        raise BaseImageError(f"{manifest.base.image} on {engine.label} ({profile.name}) differs from the lock: {'; '.join(failures)}",
                             "load the exact base image that was locked, or review and run python build.py lock")
    store_manifest = engine.store_manifest(inspect["Id"], manifest.base.image) if profile.image_store.keeps_manifests else None
    return BaseOnEngine(profile, store_manifest, inspect["Id"])


def load_unit(plan: Plan, base: BaseOnEngine) -> LoadUnit:
    """Classic store: Docker's manifest.json naming the base layers by diff_id. Containerd store: an OCI layout whose
    manifest names the base layers as the store holds them, then the gzip thin layer."""
    if base.store_manifest is None:
        members = archive_members(plan.config_bytes, list(plan.lock.base.diff_ids), plan.layer.data)
        return LoadUnit(members, expected_id(base.profile, plan.config_bytes, None))
    blob = thin_blob(plan.layer.data)
    manifest_bytes = derived_store_manifest(base.store_manifest, plan.config_bytes, blob)
    manifestcache.put(manifest_bytes)  # so the loaded image's ID resolves to its config without a docker save
    return LoadUnit(oci_layout_members(plan.config_bytes, blob, manifest_bytes), expected_id(base.profile, plan.config_bytes, manifest_bytes))


def extract_base_files(engine: Engine, manifest: Manifest, lock: Lock, tree_root: Path) -> None:
    """Copy only the files the chain modifies; each must match the lock's base hash, mode and owner."""
    with engine.created_container(manifest.base.image) as container:
        extractor = Extractor(engine, container, lock.source_root)
        for locked in lock.files:
            if locked.base_sha256 is None:
                continue
            found = extractor.file(locked.path)
            if found is None or found.sha256 != locked.base_sha256:
                got = "missing" if found is None else f"sha256 {found.sha256[:12]}…"
                raise IntegrityError(f"base file {locked.path} is {got}, the lock says {locked.base_sha256[:12]}…",
                                     "the base image is not the one that was locked; load the right one")
            if (found.mode, found.uid, found.gid) != (locked.mode, locked.uid, locked.gid):
                raise IntegrityError(f"base file {locked.path} has mode/owner {oct(found.mode)} {found.uid}:{found.gid}, the lock says "
                                     f"{oct(locked.mode)} {locked.uid}:{locked.gid}", "re-lock against this base after review")
            (tree_root / locked.path).parent.mkdir(parents=True, exist_ok=True)
            (tree_root / locked.path).write_bytes(found.data)


def rebuild_tree(engine: Engine, manifest: Manifest, lock: Lock, timings: Timings) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory(prefix="kvbake-build-") as tmp:
        tree_root = Path(tmp) / "tree"
        tree_root.mkdir()
        with timings.phase("extract"):
            extract_base_files(engine, manifest, lock, tree_root)
        with timings.phase("patch"):
            apply_chain(manifest, tree_root, GitApplier(), lock)
        return {f.path: (tree_root / f.path).read_bytes() for f in lock.files}


def expectation(plan: Plan, expected: ExpectedId) -> Expectation:
    return Expectation(plan.lock.base.diff_ids, plan.image_labels(), switch_names(plan.manifest), plan.layer.diff_id, plan.image_id,
                       store_id=expected.store_id, id_meaning=expected.profile.id_meaning)


def write_thin_archive(plan: Plan, members: list[tuple[str, bytes]], directory: Path) -> Path:
    """Write the archive; a full disk is a ResourceError and the partial file is removed."""
    target = directory / "thin-image.tar"
    try:
        with open(target, "wb") as handle:
            write_archive(handle, members, plan.lock.source_date_epoch)
    except OSError as err:
        target.unlink(missing_ok=True)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ResourceError(f"no space left while writing the thin archive in {directory.name}/",
                                "free disk space or point TMPDIR at a larger disk, then rebuild") from None
        raise
    return target


def load_and_verify(engine: Engine, plan: Plan, archive: Path, expected: ExpectedId) -> None:
    """Load untagged, verify, and remove the image again when verification fails."""
    store_id = expected.store_id
    existed = engine.inspect_image(store_id) is not None
    engine.load(archive)
    loaded = engine.identify(store_id)
    if loaded is None:
        raise IntegrityError(f"the engine reported a load but image {store_id[:19]} ({expected.describe()}) is absent",
                             f"check the engine's image store ({STORE_CHECK}); a failed unpack on the containerd store looks like this")
    failures = image_failures(loaded, expectation(plan, expected))
    if failures and not existed:
        engine.remove_image(store_id)
    raise_if_failed("the loaded image", failures)


def prepare(engine: Engine, manifest: Manifest, timings: Timings) -> tuple[Plan, BaseOnEngine]:
    """Everything up to an assembled plan: lock, base, extract, patch, three-way compare."""
    with timings.phase("check-lock"):
        lock = read_lock(manifest)
    with timings.phase("check-base"):
        engine.ping()
        base = check_base(engine, manifest, lock)
    rebuilt = rebuild_tree(engine, manifest, lock, timings)
    with timings.phase("compare"):
        compare_three_ways(lock, rebuilt, read_overlay(manifest, lock))
    with timings.phase("switch-coverage"):
        check_switch_coverage(manifest, rebuilt)
    with timings.phase("assemble"):
        plan = make_plan(manifest, lock, rebuilt)
        check_plan_matches_lock(plan)
    return plan, base


def build_image(engine: Engine, manifest: Manifest) -> BuiltImage:
    """The whole bake; on any failure nothing is tagged and temporary files are gone."""
    timings = Timings()
    plan, base = prepare(engine, manifest, timings)
    with tempfile.TemporaryDirectory(prefix="kvbake-archive-") as tmp:
        with timings.phase("write-archive"):
            unit = load_unit(plan, base)
            archive = write_thin_archive(plan, unit.members, Path(tmp))
            size = archive.stat().st_size
        with timings.phase("load-verify"):
            load_and_verify(engine, plan, archive, unit.expected)
    with timings.phase("tag"):
        engine.tag(unit.expected.store_id, plan.reference)
    return BuiltImage(plan, unit.expected.store_id, plan.reference, size, dict(timings.phases), unit.expected)


def docker_build_context(plan: Plan, directory: Path, local_base: str) -> Path:
    """A clean context: the rendered Dockerfile (FROM the checked local base) and exactly the locked files, with their locked modes."""
    dockerfile = directory / "Dockerfile.overlay"
    dockerfile.write_text(render(plan, local_base))
    for layer_file in layer_files(plan.lock, plan_tree(plan)):
        target = directory / "overlay" / layer_file.path[len(plan.lock.source_root.lstrip("/")) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(layer_file.data)
        target.chmod(layer_file.mode)
    return dockerfile


def build_with_docker(engine: Engine, manifest: Manifest) -> BuiltImage:
    """`docker build` of Dockerfile.overlay; the result must pass the same content verification (deep)."""
    from kvbake.bake.adapters.verifier import verify_image

    timings = Timings()
    plan, base = prepare(engine, manifest, timings)
    reference = plan.reference + DOCKER_BUILDER_SUFFIX
    with tempfile.TemporaryDirectory(prefix="kvbake-context-") as tmp:
        with timings.phase("docker-build"):
            dockerfile = docker_build_context(plan, Path(tmp), base.image_id)
            image_id = engine.legacy_build(Path(tmp), dockerfile, reference)
    with timings.phase("verify-deep"):
        try:
            verify_image(engine, plan, reference, deep=True, builder="docker")
        except IntegrityError:
            engine.untag(reference)
            raise
    return BuiltImage(plan, image_id, reference, 0, dict(timings.phases))
