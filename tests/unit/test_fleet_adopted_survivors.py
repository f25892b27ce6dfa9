"""The process check of an adopted serve, beyond its serve's own arguments: a file adopt recorded that was edited since
(read from the running container's layer), a file added under the source root since, and a start-up hook the image
does not hold are each named with the node."""

from __future__ import annotations

from dataclasses import replace

from kvbake.ship.adapters.serve_reader import read_rank

from fake_fleet import CONTAINER, CONTROL, SOURCE_ROOT
from helpers_manifest import sha
from test_fleet_check_rank_mutants import ADOPTED, serving, world  # noqa: F401  (world is the fixture)

EDITED = SOURCE_ROOT + "/vllm/mod.py"
HOOK = "/usr/lib/python3/dist-packages/kvhook.pth"


def hook_in_the_layer(engine) -> None:
    """The serve's interpreter runs HOOK, a start-up hook copied into the container's writable layer."""
    origin = replace(engine.origin, hooks=((HOOK, sha(b"hook")),))
    engine.containers[CONTAINER]["Origins"] = {process.pid: origin for process in engine.processes(CONTAINER)}
    engine.containers[CONTAINER]["Changes"] = {HOOK: "A"}


def failures_now(world, release):
    """Rank a's process failures against `release` as its container is now."""
    engine = world.engines["a"]
    container, image = world.fleet.observe("a", CONTROL)
    return world.fleet.process_failures("a", read_rank(engine, container), release, {}, image, container)


def test_a_file_adopt_recorded_that_was_edited_since_is_named_with_its_node(world):
    serving(world, [])
    world.engines["a"].files.setdefault(CONTAINER, {})[EDITED] = b"edited\n"
    adopted = replace(CONTROL, adopted={**ADOPTED.adopted, "changes": [EDITED], "change_sha256": {EDITED: sha(b"adopted\n")}})
    failures = failures_now(world, adopted)
    now = sha(b"edited\n")[:12]
    assert len(failures) == 1
    assert failures[0].startswith(f"a: {EDITED} was edited in the adopted serve's container after adopt (sha256 {now}, ")


def test_a_file_added_under_the_source_root_after_adopt_is_named_with_its_node(world):
    serving(world, [])
    world.engines["a"].containers[CONTAINER]["Changes"] = {SOURCE_ROOT + "/vllm/extra.py": "A"}
    failures = failures_now(world, ADOPTED)
    assert len(failures) == 1 and failures[0].startswith(f"a: {SOURCE_ROOT}/vllm/extra.py was added in the adopted serve's container")


def test_a_start_up_hook_the_image_does_not_hold_is_named_with_its_node(world):
    serving(world, [])
    engine = world.engines["a"]
    hook_in_the_layer(engine)
    failures = failures_now(world, ADOPTED)
    assert len(failures) == 1 and failures[0].startswith(f"a: its interpreter runs the start-up hook {HOOK} (in the container's writable layer)")
