"""Start-up hooks: a hook the writable layer changed, a proven hook sorted before unproven ones, a mount without a source."""

from __future__ import annotations

from kvbake.engines.core.procfs import ImportOrigin
from kvbake.ship.core.startup_hooks import hook_failures, mount_sources, unproven_hooks

SITE = "/usr/local/lib/python3.11/dist-packages"


def test_a_hook_the_writable_layer_changed_is_unproven_like_one_it_added():
    origin = ImportOrigin(f"{SITE}/vllm/__init__.py", (SITE,), hooks=((f"{SITE}/changed.pth", "d1"), (f"{SITE}/same.pth", "d2")))
    assert unproven_hooks([origin], {f"{SITE}/changed.pth": "C"}, []) == {f"{SITE}/changed.pth": "d1"}


def test_a_hook_holding_the_images_bytes_does_not_hide_the_hooks_sorted_after_it():
    unproven = {"/a/first.pth": "d1", "/b/second.pth": "d2"}
    failures = hook_failures("a", unproven, {"/a/first.pth": "d1", "/b/second.pth": "other"}, {})
    assert len(failures) == 1 and "/b/second.pth" in failures[0]


def test_a_mount_that_names_neither_a_source_nor_a_volume_is_called_a_mount():
    assert mount_sources({"Mounts": [{"Destination": "/opt/hooks"}, {"Destination": "", "Source": "/srv"}]}) == {"/opt/hooks": "a mount"}
