"""What a watch on a Ray cluster's GCS proves about a gang restart: every old Ray node gone before the first new one runs."""

# Each poll is one JSON line of tests/integration/gcs_watch.py: the cluster ID and node table the GCS at the head's
# address listed (absent when it did not answer), whether the GCS port answered, and which raylets ever listed still
# answered on their port. Probe lines (`probe`: true) carry only the last two, each time they change.

from __future__ import annotations


def alive(poll: dict) -> set[str]:
    """The nodes the GCS lists as alive in one poll."""
    return {node for node, info in (poll.get("nodes") or {}).items() if info["alive"]}


def address(poll: dict, node: str) -> tuple[str, int]:
    """Where a node's raylet listens (its node manager's address and port)."""
    info = poll["nodes"][node]
    return info["ip"], info["port"]


def addresses(poll: dict) -> set[tuple[str, int]]:
    """The raylet addresses of every node one poll lists: an answer there is that node's, whichever node held the port
    before (the kernel may give a new raylet the port an old one just freed)."""
    return {address(poll, node) for node in poll.get("nodes") or {}}


def stop_order_failures(old: dict, new: dict, polls: list[dict]) -> list[str]:
    """Against Ray's own view: no node joined the old cluster, no old Ray node (its raylet) still answered (on an address
    no node of the new cluster holds) while the new cluster listed a node, no old node registered with the new cluster,
    and the new one formed of two new nodes alone."""
    old_nodes, failures = alive(old), []
    for poll in polls:
        cluster = poll.get("cluster")
        if cluster == old["cluster"] and set(poll["nodes"]) - old_nodes:
            failures.append(f"node(s) {sorted(set(poll['nodes']) - old_nodes)} joined the old cluster {cluster[:12]}")
        elif cluster not in (None, old["cluster"]):
            taken = addresses(poll) | addresses(new)  # a new raylet may listen before its GCS lists it
            still = old_nodes & set(old_answers(poll, [old, *polls], taken))
            if still and poll["nodes"]:
                failures.append(f"old Ray node(s) {sorted(still)} answered while the new cluster {cluster[:12]} listed {sorted(poll['nodes'])}")
            if old_nodes & set(poll["nodes"]):
                failures.append(f"old node(s) {sorted(old_nodes & set(poll['nodes']))} registered with the new cluster {cluster[:12]}")
    if set(new["nodes"]) != alive(new) or len(alive(new)) != 2:
        failures.append(f"the new cluster's node table is not two alive nodes: {new['nodes']}")
    return failures


def gang_down_seen(new: dict, polls: list[dict]) -> bool:
    """Whether some poll or probe found the GCS port closed and no old raylet answering: the old gang was down before
    the new one began. An answer on an address a node of the new cluster holds is that node's (the kernel may give it
    the port an old raylet freed)."""
    taken = addresses(new)
    return any(poll["gcs_up"] is False and not old_answers(poll, polls, taken) for poll in polls)


def old_answers(poll: dict, polls: list[dict], taken: set[tuple[str, int]]) -> list[str]:
    """The raylets one poll found answering, less those whose listed address a node of the new cluster now holds."""
    return [node for node in poll["raylets_up"] if not any(node in (seen.get("nodes") or {}) and address(seen, node) in taken
                                                           for seen in polls)]


def timeline(polls: list[dict]) -> str:
    """The polls in one line each, for a failed assertion: seconds since the first, the cluster (`-` when none was
    read, `probe` for a probe line), whether the GCS port answered, the alive nodes listed and how many raylets
    answered."""
    start = polls[0]["t"] if polls else 0.0
    return "; ".join(f"+{poll['t'] - start:.2f}s {'probe' if poll.get('probe') else (poll.get('cluster') or '-')[:8]} "
                     f"gcs={'up' if poll['gcs_up'] else 'down'} alive={len(alive(poll))} raylets={len(poll['raylets_up'])}"
                     for poll in polls)
