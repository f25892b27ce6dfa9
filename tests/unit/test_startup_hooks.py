"""The start-up hooks a serve runs, held against its image's own by content."""

from __future__ import annotations

from kvbake.engines.core.procfs import ImportOrigin
from kvbake.ship.core.startup_hooks import covering_mount, hook_failures, mount_sources, unproven_hooks

SITE = "/usr/local/lib/python3.11/dist-packages"


def origin(*hooks: tuple[str, str]) -> ImportOrigin:
    return ImportOrigin(f"{SITE}/vllm/__init__.py", (SITE,), hooks=hooks)


def test_only_a_hook_in_the_writable_layer_or_under_a_mount_is_unproven():
    hooks = (("/etc/python3.11/sitecustomize.py", "d1"), (f"{SITE}/distutils-precedence.pth", "d2"),
             ("/opt/hooks/sitecustomize.py", "d3"), ("/root/.local/lib/python3.11/site-packages/usercustomize.py", "d4"),
             (f"{SITE}/gone.pth", "d5"))
    changes = {"/root/.local/lib/python3.11/site-packages/usercustomize.py": "A", f"{SITE}/gone.pth": "D", "/etc/hosts": "C"}
    assert unproven_hooks([origin(*hooks)], changes, ["/opt/hooks", "/models"]) == {
        "/opt/hooks/sitecustomize.py": "d3", "/root/.local/lib/python3.11/site-packages/usercustomize.py": "d4"}


def test_the_deepest_mount_covers_a_path_and_a_sibling_prefix_does_not():
    mounts = ["/opt", "/opt/hooks", "/opt/hooks-other"]
    assert covering_mount("/opt/hooks/sitecustomize.py", mounts) == "/opt/hooks"
    assert covering_mount("/opt/hooks", mounts) == "/opt/hooks"
    assert covering_mount("/optional/x.pth", mounts) is None


def test_a_hook_with_the_images_own_bytes_passes_and_others_are_named_with_where_they_come_from():
    mounts = mount_sources({"Mounts": [{"Destination": "/opt/hooks", "Source": "/srv/hooks"}, {"Destination": "/v", "Name": "cache"}]})
    assert mounts == {"/opt/hooks": "/srv/hooks", "/v": "cache"}
    unproven = {"/opt/hooks/sitecustomize.py": "d3", "/usr/lib/x.pth": "d4", "/v/same.pth": "d5"}
    failures = hook_failures("b", unproven, {"/opt/hooks/sitecustomize.py": None, "/usr/lib/x.pth": "other", "/v/same.pth": "d5"}, mounts)
    assert failures == [
        "b: its interpreter runs the start-up hook /opt/hooks/sitecustomize.py (mounted from /srv/hooks), which the image does not "
        "hold: it can set switches after exec, out of sight of the process environment",
        "b: its interpreter runs the start-up hook /usr/lib/x.pth (in the container's writable layer), with bytes other than the "
        "image's: it can set switches after exec, out of sight of the process environment"]
