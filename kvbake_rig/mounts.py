"""Find and release mounts an engine left below one of the rig's folders."""

from __future__ import annotations

import subprocess
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")


def _unescape(field: str) -> str:
    """Decode the octal escapes (space, tab, newline, backslash) of /proc mount fields."""
    return field.encode().decode("unicode_escape")


def mounts_below(folder: Path) -> list[Path]:
    """Mount points at or below `folder`, deepest first."""
    prefix = str(folder.resolve()) if folder.exists() else str(folder)
    points = []
    for line in MOUNTINFO.read_text().splitlines():
        point = _unescape(line.split()[4])
        if point == prefix or point.startswith(prefix + "/"):
            points.append(Path(point))
    return sorted(points, key=lambda path: len(path.parts), reverse=True)


def unmount_below(folder: Path) -> list[Path]:
    """Unmount everything at or below `folder` (lazily when busy); return what was mounted."""
    points = mounts_below(folder)
    for point in points:
        if subprocess.run(["umount", str(point)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
    return points
