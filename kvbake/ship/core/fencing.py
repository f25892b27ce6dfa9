"""A node's write fence: a generation the node carries as the name of one container, and which engine calls write."""

from __future__ import annotations

import re
from typing import Iterable

FENCE_PREFIX = "kvbake-fence-"
FENCE_LABEL = "kvbake.fence"
FENCE_IMAGE = "kvbake-fence:1"  # an image that holds no file, made on each node: the fence pins no release image
_GENERATION = re.compile(re.escape(FENCE_PREFIX) + r"(\d+)")

# The engine calls that change a node: each one first advances the node's fence. Every other call only reads (a
# throw-away probe or copy container included). tests/unit/test_node_fence.py holds every Engine method to one of the two
# and the writes to a list of its own, written apart from this one.
WRITES = frozenset({"commit", "copy_in", "create_marker", "ensure_empty_image", "exec_detached", "legacy_build", "load", "pull", "push", "recreate", "remove_container",
                    "remove_image", "rename_and_start", "rename_container", "set_restart_policy", "start", "stop", "stop_and_rename",
                    "tag", "untag"})
READS = frozenset({"changes", "config_digest_of", "config_dir", "container_inspect", "containers_labelled", "container_log_tail", "container_logs", "copy_out",
                   "created_container", "dir_meta", "exec_in", "existing_paths", "identify", "image_id_of", "import_origins",
                   "inspect_image", "ping", "processes", "profile", "remember_manifest", "require_image", "run_probe", "run_python",
                   "running_containers", "save_stream", "store_manifest", "store_root", "system_time", "tags_of_repository", "top"})


def fence_name(generation: int) -> str:
    return f"{FENCE_PREFIX}{generation}"


def generation_of(name: str) -> int | None:
    """The generation a fence container's name carries (Docker may show it with a leading slash), or None."""
    found = _GENERATION.fullmatch(name.lstrip("/"))
    return int(found.group(1)) if found else None


def newest_generation(names: Iterable[str]) -> int | None:
    """The highest generation among these container names, or None when none is a fence."""
    generations = [g for g in map(generation_of, names) if g is not None]
    return max(generations) if generations else None
