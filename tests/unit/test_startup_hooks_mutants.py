"""The mount that covers a path: a destination given with a trailing slash, the root mount, and a destination whose
name ends in a capital X."""

from __future__ import annotations

import pytest

from kvbake.ship.core.startup_hooks import covering_mount


@pytest.mark.parametrize(("path", "mounts", "covering"), [
    ("/opt/hooks/sitecustomize.py", ["/opt/hooks/"], "/opt/hooks/"),
    ("/usr/lib/x.pth", ["/"], "/"),
    ("/opt/hooks/sitecustomize.py", ["/", "/opt/hooks"], "/opt/hooks"),
    ("/opt/MAX/sitecustomize.py", ["/opt/MAX"], "/opt/MAX"),
    ("/opt/MAXX", ["/opt/MA"], None),
])
def test_a_mount_covers_the_paths_at_and_below_its_destination(path, mounts, covering):
    assert covering_mount(path, mounts) == covering
