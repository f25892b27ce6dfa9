"""The start-up hooks a serve's interpreter runs (sitecustomize, usercustomize, .pth), held against the image's own."""

# An allow-list by content, never a list of forbidden paths.

# A hook can set a switch after exec, where no process environment shows it. The container's file system is its image,
# its writable layer and its mounts, so a hook that is neither in the writable layer nor at or under a mount is the
# image's own by construction; the others must hold the image's bytes at the same path.

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from kvbake.engines.core.procfs import ImportOrigin

def mount_sources(container: Mapping[str, Any]) -> dict[str, str]:
    """Each mount's destination in the container and where it comes from (a host path or a volume's name)."""
    return {str(m.get("Destination", "")): str(m.get("Source") or m.get("Name") or "a mount")
            for m in container.get("Mounts") or () if m.get("Destination")}

def covering_mount(path: str, mounts: Iterable[str]) -> str | None:
    """The mount destination at or above a path, the deepest one; None for a path of the image or the layer."""
    found = [target for target in mounts if path == target or path.startswith(target.rstrip("/") + "/")]
    return max(found, key=len) if found else None

# Kernel file systems every container has, never listed among its mounts: a hook whose real path lies there (a .pth
# linked into /dev/shm) is never the image's.
KERNEL_ROOTS = ("/dev/", "/proc/", "/sys/")


def unproven_hooks(origins: Sequence[ImportOrigin], changes: Mapping[str, str], mounts: Iterable[str]) -> dict[str, str]:
    """The hooks the image may not hold (path: sha256): one the writable layer added or changed, one a mount puts
    there, or one whose real path is on a kernel file system."""
    mounts = tuple(mounts)
    return {path: digest for origin in origins for path, digest in origin.hooks
            if changes.get(path) in ("A", "C") or covering_mount(path, mounts) or path.startswith(KERNEL_ROOTS)}

def hook_failures(where: str, unproven: Mapping[str, str], image: Mapping[str, str | None], mounts: Mapping[str, str]) -> list[str]:
    """One line per hook that is not the image's own: absent from the image, or other bytes at its path."""
    failures = []
    for path, digest in sorted(unproven.items()):
        if image.get(path) == digest:
            continue
        target = covering_mount(path, mounts)
        how = (f"mounted from {mounts[target]}" if target else "on a kernel file system" if path.startswith(KERNEL_ROOTS)
               else "in the container's writable layer")
        held = "which the image does not hold" if image.get(path) is None else "with bytes other than the image's"
        failures.append(f"{where}: its interpreter runs the start-up hook {path} ({how}), {held}: it can set switches after "
                        f"exec, out of sight of the process environment")
    return failures
