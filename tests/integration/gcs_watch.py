"""Watch a Ray cluster from outside its nodes, run with the Ray stand-in base's python3: every poll prints one JSON line
with what the GCS at ADDRESS lists (its cluster ID, every node it knows, alive or dead), whether its port answered,
and which of the raylets ever listed still answer on their node manager port. A GCS that does not answer is a poll
without a cluster. Beside the polls (each of which may wait seconds on a GCS read), a probe checks the same ports every
PROBE_S and prints a line whenever what answers changes, so that a short gap between two clusters is seen."""

import json
import socket
import sys
import threading
import time

POLL_S = 0.25
PROBE_S = 0.05
PRINTING = threading.Lock()


def emit(line: dict) -> None:
    with PRINTING:
        print(json.dumps(line), flush=True)


def answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.3).close()
        return True
    except OSError:
        return False


def read_node_table(address: str, into: dict) -> None:
    from ray._raylet import GcsClient
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    client = GcsClient(address=address)  # waits up to 40 s for a GCS that went away meanwhile: the caller does not
    nodes = client.get_all_node_info(timeout=2)
    into["nodes"] = {info.node_id.hex(): {"ip": info.node_manager_address, "port": info.node_manager_port,
                                          "alive": GcsNodeInfo.GcsNodeState.Name(info.state) == "ALIVE"} for info in nodes.values()}
    into["cluster"] = client.cluster_id.hex()


def up(raylets: dict) -> list[str]:
    return sorted(node for node, (ip, raylet_port) in list(raylets.items()) if answers(ip, raylet_port))


def probe(host: str, port: int, raylets: dict) -> None:
    """What answers, as a line of its own each time it changes: the GCS port and the raylets listed so far."""
    last = None
    while True:
        seen = {"gcs_up": answers(host, port), "raylets_up": up(raylets)}
        if seen != last:
            emit({"t": time.time(), "probe": True, **seen})
            last = seen
        time.sleep(PROBE_S)


def watch(address: str) -> None:
    host, port = address.rsplit(":", 1)
    raylets: dict[str, tuple[str, int]] = {}
    threading.Thread(target=probe, args=(host, int(port), raylets), daemon=True).start()
    while True:
        poll: dict = {"t": time.time(), "gcs_up": answers(host, int(port))}
        if poll["gcs_up"]:
            table: dict = {}
            reader = threading.Thread(target=read_node_table, args=(address, table), daemon=True)
            reader.start()
            reader.join(5)
            poll.update(table if "cluster" in table else {})
        for node, info in poll.get("nodes", {}).items():
            raylets.setdefault(node, (info["ip"], info["port"]))
        poll["raylets_up"] = up(raylets)
        emit(poll)
        time.sleep(POLL_S)


if __name__ == "__main__":
    watch(sys.argv[1])
