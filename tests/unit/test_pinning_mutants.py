"""`lock`'s pinning, the corners its other tests leave open: donor imports, registry copies, store kinds and refusals' words."""

from __future__ import annotations

import errno
import logging

import pytest

from kvbake.bake.adapters import base_source, pinning
from kvbake.bake.adapters.pinning import create_lock, locked_base, refuse_silent_repin, registry_digest_of, source_date_epoch, split_dirs
from kvbake.bake.core import overlayswap
from kvbake.digests import canonical_json, sha256_digest, sha256_hex
from kvbake.engines.adapters import manifestcache
from kvbake.engines.core.savefile import DirMeta
from kvbake.errors import BaseImageError, LockError
from kvbake.lock import load_lock_file
from kvbake.manifest import Manifest, load_manifest
from kvbake.registry.core.remote_manifest import OCI_INDEX, OCI_MANIFEST
from tests.unit.bake_engine import LAYER_MTIME, BakeEngine, layer_tar
from tests.unit.bake_project import BASE_CONFIG, BASE_IMAGE, MODULE, base_entries, engine_with_base, project
from tests.unit.message_words import says
from tests.unit.test_base_source import Registry, image_manifest, serve
from tests.unit.test_donor_entries import git

ROOT = "/usr/lib/py"
DIGEST = "sha256:" + "e" * 64
REGISTRY = "127.0.0.1:5000"


@pytest.fixture(autouse=True)
def fixed_epoch_and_private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv(manifestcache.CACHE_ENV, str(tmp_path / "cache"))


class StatEngine(BakeEngine):
    """The BakeEngine that also answers `dir_meta` (the registry route stats the wanted directories) and records every
    identity it is asked for."""

    def dir_meta(self, container: str, path: str) -> DirMeta | None:
        inside = any(name.startswith(path + "/") for name in self.files.get(container, {}))
        return DirMeta(0o755, 0, 0, LAYER_MTIME) if inside else None

    def config_digest_of(self, inspect, reference, fetch=None) -> str:
        self.calls.append(("config_digest_of", reference))
        return super().config_digest_of(inspect, reference, fetch)


def stat_engine_with_base(module: str = MODULE) -> StatEngine:
    engine = StatEngine()
    engine.add_image(BASE_IMAGE, BASE_CONFIG, [layer_tar(base_entries(module))])
    return engine


# --- create_lock with a donor ----------------------------------------------------------------------------------------

def donor_project(tmp_path) -> tuple[Manifest, object]:
    """The tiny project whose manifest pins a donor checkout holding its one patch (which the project lacks)."""
    manifest = project(tmp_path)
    donor = tmp_path / "donor"
    (donor / "patches").mkdir(parents=True)
    git(donor, "init", "-q")
    (donor / "patches" / manifest.chain[0].path.name).write_bytes(manifest.chain[0].path.read_bytes())
    git(donor, "add", "-A")
    git(donor, "commit", "-q", "-m", "patches")
    head = git(donor, "rev-parse", "HEAD").strip()
    manifest.path.write_text(manifest.path.read_text().replace(manifest.donor.revision, head))
    manifest.chain[0].path.unlink()
    return load_manifest(manifest.path), donor


def test_after_a_donor_import_lock_reads_the_manifest_again(tmp_path):
    manifest, donor = donor_project(tmp_path)
    manifest.path.write_text(manifest.path.read_text().replace(manifest.donor.url, "https://example.invalid/moved.git"))
    lock = create_lock(engine_with_base(), manifest, donor=donor)
    assert lock.donor_url == "https://example.invalid/moved.git"


def test_imported_patches_stay_when_the_overlay_swap_fails_after_the_lock_is_written(tmp_path, monkeypatch):
    manifest, donor = donor_project(tmp_path)
    real_rename = overlayswap.rename_durably

    def failing_into_overlay(source, target):
        if target.name == "overlay":
            raise OSError(errno.EIO, "Input/output error", str(target))
        real_rename(source, target)

    monkeypatch.setattr(overlayswap, "rename_durably", failing_into_overlay)
    with pytest.raises(LockError):
        create_lock(engine_with_base(), manifest, donor=donor)
    patch = manifest.chain[0].path
    assert patch.is_file(), "the written lock pins the imported patch, so it is kept"
    assert load_lock_file(manifest.lock_path).patches[0].sha256 == sha256_hex(patch.read_bytes())


# --- locked_base -----------------------------------------------------------------------------------------------------

def serve_the_base_by_an_index(monkeypatch, engine: BakeEngine) -> str:
    """A registry holding the base under an OCI index (an arm64 manifest first, then the base's amd64 one); its
    repository digest is put in the base's RepoDigests, and returned."""
    base_id = engine.image_id_of(BASE_IMAGE)
    config = engine.configs_by_id[base_id]
    manifest = image_manifest(config, OCI_MANIFEST)
    other = image_manifest(canonical_json({"rootfs": {"diff_ids": []}}), OCI_MANIFEST)
    index = canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": sha256_digest(other), "size": len(other), "platform": {"os": "linux", "architecture": "arm64"}},
        {"mediaType": OCI_MANIFEST, "digest": sha256_digest(manifest), "size": len(manifest), "platform": {"os": "linux", "architecture": "amd64"}},
    ]})
    serve(monkeypatch, Registry(index, manifest, other, config))
    copy = f"{REGISTRY}/tiny@{sha256_digest(index)}"
    engine.images[base_id]["RepoDigests"] = [copy]
    return copy


def test_a_base_in_a_registry_index_is_read_from_its_platforms_entry_without_a_save_and_lock_says_so(tmp_path, monkeypatch, caplog):
    engine = stat_engine_with_base()
    copy = serve_the_base_by_an_index(monkeypatch, engine)
    with caplog.at_level(logging.INFO, logger=pinning.__name__):
        base, dirs = locked_base(engine, project(tmp_path), frozenset({"usr", "usr/lib"}))
    assert base.config_digest == engine.image_id_of(BASE_IMAGE) and set(dirs) == {"usr", "usr/lib"}
    assert not [c for c in engine.calls if c[0] == "save"], "the index's linux/amd64 entry gives the config"
    told = [r.getMessage() for r in caplog.records if r.name == pinning.__name__]
    assert any(says(text, BASE_IMAGE) and says(text, f"registry {copy}") for text in told)


def test_on_the_containerd_store_a_digest_of_a_repository_without_a_registry_host_pins_nothing(tmp_path):
    engine = engine_with_base(store="containerd")
    base_id = engine.image_id_of(BASE_IMAGE)
    engine.configs[base_id] = base_id
    engine.images[base_id]["RepoDigests"] = [f"kvbake-test/tiny@{DIGEST}"]
    base, _ = locked_base(engine, project(tmp_path), frozenset())
    assert base.repo_digest is None and base.config_digest == base_id


# --- refuse_silent_repin ---------------------------------------------------------------------------------------------

def test_a_moved_base_tag_is_refused_naming_the_reference_and_both_configs(tmp_path):
    manifest = project(tmp_path)
    first = create_lock(engine_with_base(), manifest)
    moved = stat_engine_with_base(MODULE + "# moved\n")
    with pytest.raises(BaseImageError) as caught:
        refuse_silent_repin(moved, manifest, rebase=False)
    now = moved.image_id_of(BASE_IMAGE)
    assert says(caught.value.message, BASE_IMAGE) and says(caught.value.message, now) and says(caught.value.message, first.base.config_digest)
    assert says(caught.value.fix, f"rebase --to {BASE_IMAGE}")
    assert [c for c in moved.calls if c[0] == "config_digest_of"] == [("config_digest_of", BASE_IMAGE)], \
        "the engine is asked for the identity of the base reference by its name"


# --- registry_digest_of, source_date_epoch, split_dirs ---------------------------------------------------------------

def test_a_repository_digest_is_everything_after_the_first_at_sign():
    assert registry_digest_of("ghcr.io/x/img:v5", [f"ghcr.io/x/img@{DIGEST}@tail"], "classic") == f"{DIGEST}@tail"


def test_a_malformed_epoch_is_quoted_up_to_forty_characters(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "x" * 40 + "yz")
    with pytest.raises(LockError) as caught:
        source_date_epoch(project(tmp_path))
    assert says(caught.value.message, repr("x" * 40))


def test_a_source_root_ending_in_a_capital_x_keeps_its_created_directories_relative():
    wanted = frozenset({"opt", "opt/BOX", "opt/BOX/new"})
    found = {"opt": DirMeta(0o755, 0, 0, 1), "opt/BOX": DirMeta(0o755, 0, 0, 1)}
    assert split_dirs("/opt/BOX", wanted, found)[1] == ("new",)


def test_an_absolute_directory_is_never_locked_as_created():
    wanted = frozenset({"usr", "usr/lib", "usr/lib/py", "/etc"})
    found = {d: DirMeta(0o755, 0, 0, 1) for d in ("usr", "usr/lib", "usr/lib/py")}
    with pytest.raises(BaseImageError) as caught:
        split_dirs(ROOT, wanted, found)
    assert says(caught.value.message, "/etc")


def test_every_missing_directory_above_the_source_root_is_listed_and_the_fix_names_the_source_root():
    with pytest.raises(BaseImageError) as caught:
        split_dirs(ROOT, frozenset({"usr", "usr/lib", "usr/lib/py", "usr/lib/py/pkg"}), {"usr": DirMeta(0o755, 0, 0, 1)})
    assert says(caught.value.message, "usr/lib, usr/lib/py") and says(caught.value.fix, "base.source_root")
