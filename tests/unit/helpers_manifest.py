"""Shared builders for unit tests: a tiny manifest on disk, and Lock values written by hand."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

from kvbake.lock import Derived, Lock, LockedBase, LockedDir, LockedFile, LockedPatch, PatchFileHashes
from kvbake.manifest import Manifest, load_manifest

MINIMAL = """\
format: 1
name: tiny
standin: true
base: {image: "kvbake-test/tiny:1", platform: native, source_root: /usr/lib/py}
donor: {url: "https://example.invalid/tiny.git", revision: "0123456789abcdef0123456789abcdef01234567"}
chain:
  - {id: "0001", file: patches/0001-tiny.patch, role: feature}
switches:
  TINY_SWITCH: {values: ["3"]}
  TINY_OTHER: {values: ["1"], requires: [TINY_SWITCH]}
forbidden: {TINY_BAD: "reason"}
presets:
  control: {status: validated, max_model_len: 1024, switches: {}, note: "all off"}
output: {repository: "127.0.0.1:5000/tiny", tag: "{base_tag}-kvpack-{short_id}"}
"""

BASE_DIFF_IDS = ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
BASE_SIZES = (1024, 2048)
EPOCH = 1_700_000_000


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def minimal_document() -> dict[str, Any]:
    """The minimal manifest as a fresh, mutable dict."""
    return yaml.safe_load(MINIMAL)


def referenced_files(text: str) -> list[str]:
    """The chain files a manifest text names (empty when the text is not a usable manifest)."""
    try:
        document = yaml.safe_load(text)
        return [p["file"] for p in document["chain"] if isinstance(p.get("file"), str)]
    except Exception:  # noqa: BLE001 - a broken manifest simply references nothing
        return []


def write_patch_files(folder: Path, files: list[str], content: bytes = b"") -> None:
    """Create the referenced patch files, skipping any that would land outside the folder."""
    for relative in files:
        if relative.startswith("/") or ".." in Path(relative).parts:
            continue
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.write_bytes(content)


def write_manifest(folder: Path, manifest: str | dict[str, Any] = MINIMAL, patches: dict[str, bytes] | None = None,
                   name: str = "manifest.yaml") -> Path:
    """Write a manifest (text or dict) and its patch files (empty unless given) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest, sort_keys=False)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    for relative, data in (patches or {}).items():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    write_patch_files(folder, referenced_files(text))
    return path


def tiny_manifest(folder: Path, manifest: str | dict[str, Any] = MINIMAL, patches: dict[str, bytes] | None = None) -> Manifest:
    return load_manifest(write_manifest(folder, manifest, patches))


def base_config() -> dict[str, Any]:
    """A raw base image config with everything derived_config must keep or drop."""
    return {
        "architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z",
        "container": "0f" * 32, "container_config": {"Cmd": ["/bin/sh", "-c", "#(nop) build"]},
        "config": {
            "Env": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"], "Entrypoint": ["python3", "-m", "server"], "Cmd": ["--port", "8000"],
            "WorkingDir": "/srv", "User": "1000:1000", "Labels": {"maintainer": "base team"},
        },
        "history": [{"created": "2024-01-01T00:00:00Z", "created_by": "ADD rootfs"}, {"created": "2024-01-01T00:00:00Z", "created_by": "COPY py"}],
        "rootfs": {"type": "layers", "diff_ids": list(BASE_DIFF_IDS)},
    }


def locked_file(path: str, data: bytes, base: bytes | None = b"old\n", mode: int = 0o644, uid: int = 0, gid: int = 0,
                stale: tuple[str, ...] = ()) -> LockedFile:
    return LockedFile(path, sha(base) if base is not None else None, sha(data), mode, uid, gid, stale)


def make_lock(manifest_sha256: str = "0" * 64, files: tuple[LockedFile, ...] = (), patches: tuple[LockedPatch, ...] | None = None,
              dirs: tuple[LockedDir, ...] = (), new_dirs: tuple[str, ...] = (), overlay_tree_sha256: str = "1" * 64, repo_digest: str | None = None,
              derived: Derived | None = None) -> Lock:
    """A Lock value built by hand; every field has a plausible default."""
    return Lock(
        format=1, manifest_sha256=manifest_sha256, source_root="/usr/lib/py", source_date_epoch=EPOCH,
        donor_url="https://example.invalid/tiny.git", donor_revision="0123456789abcdef0123456789abcdef01234567",
        base=LockedBase(reference="kvbake-test/tiny:1", platform="linux/amd64", config_digest="sha256:" + "c" * 64,
                        diff_ids=BASE_DIFF_IDS, repo_digest=repo_digest, config=base_config(), layer_sizes=BASE_SIZES),
        patches=patches if patches is not None else (LockedPatch("0001", "patches/0001-tiny.patch", "2" * 64, "3" * 40,
                                        (PatchFileHashes("pkg/mod.py", "modify", "4" * 64, "5" * 64),)),),
        files=files, dirs=dirs, new_dirs=new_dirs, overlay_tree_sha256=overlay_tree_sha256,
        derived=derived or Derived(layer_diff_id="sha256:" + "6" * 64, image_id="sha256:" + "7" * 64),
    )
