"""The plan: everything a build will do, computed from the manifest, lock and overlay bytes, before anything happens."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kvbake.bake.core.derived_image import derived_config, image_id, rfc3339
from kvbake.bake.core.provenance import labels as provenance_labels
from kvbake.bake.core.thin_layer import NEW_DIR_MODE, LayerDir, LayerFile, ThinLayer, build_layer, in_image
from kvbake.digests import sha256_hex, tree_sha256
from kvbake.errors import IntegrityError
from kvbake.lock import Derived, Lock
from kvbake.manifest import Manifest

OVERLAY_DIR = "overlay"


@dataclass(frozen=True)
class Plan:
    """A build, fully determined: the tag, the labels, the layer and the image it must produce."""

    manifest: Manifest
    lock: Lock
    reference: str
    tag: str
    labels: Mapping[str, str]
    layer: ThinLayer
    config_bytes: bytes
    image_id: str
    whiteouts: tuple[str, ...]
    tree: Mapping[str, bytes]

    def image_labels(self) -> dict[str, str]:
        """Every label the derived image holds: the base's, overlaid with kvbake's."""
        base = (self.lock.base.config.get("config") or {}).get("Labels") or {}
        return {**base, **self.labels}

    def derived(self) -> Derived:
        return Derived(layer_diff_id=self.layer.diff_id, image_id=self.image_id)


def tag_for(manifest: Manifest, lock: Lock) -> str:
    short_id = lock.core_sha256()[:12]
    return manifest.output.tag.format(base_tag=manifest.base.tag, short_id=short_id, name=manifest.name)


def overlay_root(manifest: Manifest) -> Path:
    return manifest.root / OVERLAY_DIR


def make_plan(manifest: Manifest, lock: Lock, tree: Mapping[str, bytes]) -> Plan:
    """Assemble the layer and config from the patched file bytes (`tree`: path → bytes)."""
    tag = tag_for(manifest, lock)
    labels = provenance_labels(manifest, lock, tag)
    layer = build_layer(layer_files(lock, tree), whiteouts(lock), layer_dirs(lock), lock.source_date_epoch)
    created_by = f"kvbake bake {manifest.name}: chain {' '.join(p.id for p in lock.patches)}"
    config = derived_config(lock.base.config, layer.diff_id, labels, rfc3339(lock.source_date_epoch), created_by)
    return Plan(manifest, lock, f"{manifest.output.repository}:{tag}", tag, labels, layer, config, image_id(config), tuple(whiteouts(lock)), dict(tree))


def layer_files(lock: Lock, tree: Mapping[str, bytes]) -> list[LayerFile]:
    files = []
    for locked in lock.files:
        data = tree[locked.path]
        files.append(LayerFile(in_image(lock.source_root, locked.path), data, locked.mode, locked.uid, locked.gid))
    return files


def layer_dirs(lock: Lock) -> list[LayerDir]:
    """Base directories with their locked metadata, plus the directories the chain creates."""
    existing = [LayerDir(d.path, d.mode, d.uid, d.gid, d.mtime) for d in lock.dirs]
    created = [LayerDir(in_image(lock.source_root, d), NEW_DIR_MODE, 0, 0, lock.source_date_epoch) for d in lock.new_dirs]
    return existing + created


def whiteouts(lock: Lock) -> list[str]:
    return sorted(in_image(lock.source_root, pyc) for f in lock.files for pyc in f.stale_bytecode)


def read_overlay(manifest: Manifest, lock: Lock) -> dict[str, bytes]:
    """The shipped overlay/ files the lock lists; a missing one is an integrity error."""
    root = overlay_root(manifest)
    tree = {}
    for locked in lock.files:
        path = root / locked.path
        if not path.is_file():
            raise IntegrityError(f"overlay/{locked.path} is missing", "run python build.py lock to regenerate overlay/")
        tree[locked.path] = path.read_bytes()
    return tree


def compare_three_ways(lock: Lock, rebuilt: Mapping[str, bytes], shipped: Mapping[str, bytes]) -> None:
    """Rebuilt tree vs shipped overlay/ vs the lock's hashes; name which of the three disagrees."""
    for locked in lock.files:
        r, s, l = sha256_hex(rebuilt[locked.path]), sha256_hex(shipped[locked.path]), locked.overlay_sha256
        if r == s == l:
            continue
        if r == l:
            odd = "the shipped overlay/ differs from the rebuilt tree and the lock"
            fix = "restore overlay/ from the rebuild (python build.py lock) or from version control"
        elif s == l:
            odd = "the rebuilt tree differs from overlay/ and the lock"
            fix = "the chain or base changed; review and re-lock"
        else:
            odd = "the lock differs from both the rebuilt tree and overlay/" if r == s else "all three differ"
            fix = "review the change and run python build.py lock"
        raise IntegrityError(f"{locked.path}: {odd} (rebuilt {r[:12]}…, overlay {s[:12]}…, lock {l[:12]}…)", fix)
    tree_hash = tree_sha256((p, sha256_hex(b)) for p, b in rebuilt.items())
    if tree_hash != lock.overlay_tree_sha256:
        raise IntegrityError("the rebuilt overlay tree hash differs from the lock", "run python build.py lock")


def plan_summary(plan: Plan) -> dict[str, Any]:
    """The plan as plain data for `build.py plan` and the build record."""
    lock = plan.lock
    return {
        "manifest": plan.manifest.path.name, "name": plan.manifest.name, "standin": plan.manifest.standin,
        "base": {"reference": lock.base.reference, "config_digest": lock.base.config_digest, "diff_ids": list(lock.base.diff_ids), "platform": lock.base.platform},
        "chain": [{"id": p.id, "sha256": p.sha256, "patch_id": p.patch_id, "files": [f.path for f in p.files]} for p in lock.patches],
        "files": [{"path": f.path, "before": f.base_sha256, "after": f.overlay_sha256, "mode": oct(f.mode), "owner": f"{f.uid}:{f.gid}"} for f in lock.files],
        "whiteouts": list(plan.whiteouts), "new_dirs": list(lock.new_dirs),
        "layer_diff_id": plan.layer.diff_id, "image_id": plan.image_id, "tag": plan.tag, "reference": plan.reference,
        "labels": dict(plan.labels), "switches_in_env": [],
    }


def check_plan_matches_lock(plan: Plan) -> None:
    if plan.derived() != plan.lock.derived:
        raise IntegrityError(f"the assembled image {plan.image_id[:19]} differs from the lock's {plan.lock.derived.image_id[:19]}",
                             "run python build.py lock to refresh the derived section after reviewing why")
