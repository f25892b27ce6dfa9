"""Where an engine keeps an image's raw config (and, on the containerd store, its manifests) on its own host."""

# The classic store keeps each image's config, named by the image ID's hex, under its root's imagedb; the containerd
# image store keeps every blob (index, manifest, config) in containerd's content store, by digest. dockerd starts its
# own containerd under its root unless it is given the machine's, whose root is containerd's default.

from __future__ import annotations

CONTENT_BLOBS = "io.containerd.content.v1.content/blobs/sha256"
MACHINE_CONTAINERD_ROOT = "/var/lib/containerd"


def blob_folders(docker_root: str, driver: str, keeps_manifests: bool) -> tuple[str, ...]:
    """The folders on the engine's host that may hold the image's blobs by their hex digest, the likeliest first."""
    root = docker_root.rstrip("/")
    if keeps_manifests:
        return (f"{root}/containerd/daemon/{CONTENT_BLOBS}", f"{MACHINE_CONTAINERD_ROOT}/{CONTENT_BLOBS}")
    return (f"{root}/image/{driver}/imagedb/content/sha256",)


def blob_name(digest: str) -> str:
    """A blob's file name in those folders: its digest's hex."""
    algorithm, _, hex_part = digest.partition(":")
    if algorithm != "sha256" or len(hex_part) != 64 or any(c not in "0123456789abcdef" for c in hex_part):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return hex_part
