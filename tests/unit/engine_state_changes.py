"""Which engine calls change a node, written out on their own so that the fence's tests never take kvbake's list as the answer."""

# A call belongs here when it leaves the node other than it found it, so that another host reading the node afterwards
# sees the change. Every other call of `Engine` only reads, or makes a throw-away container that is gone when the call
# returns (a created, never-started copy container; a probe or python3 run with --rm), which no host acts on.
STATE_CHANGING_CALLS = {
    "commit": "adds an image to the node's store: the copy of a container's writable layer, under a tag",
    "copy_in": "puts a file into a container: the node's release records, its journal, its audit lines",
    "create_marker": "creates a container that stays: a lock, a fence, the state container",
    "ensure_empty_image": "imports an image under a tag when the node lacks it",
    "exec_detached": "starts a process in a running container: a vLLM serve docker exec started",
    "legacy_build": "builds an image and tags it",
    "load": "adds images to the node's store",
    "pull": "adds an image to the node's store",
    "push": "uploads an image: the registry's tag moves to it",
    "recreate": "creates a container from a recorded create spec",
    "remove_container": "removes a container, a serve or a lock among them",
    "remove_image": "removes an image and its tag",
    "rename_and_start": "gives a container its name back and starts it",
    "rename_container": "renames a container: the fence's compare-and-swap, a serve set aside",
    "set_restart_policy": "changes whether the engine starts a container again at boot",
    "start": "starts a container",
    "stop": "stops a container (one started with --rm is removed too)",
    "stop_and_rename": "stops a container and renames it",
    "tag": "points a tag at an image",
    "untag": "removes a tag",
}
