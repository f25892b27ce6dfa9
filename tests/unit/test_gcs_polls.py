"""The judgement of a watch on a Ray cluster's GCS (kvbake_rig/gcs_polls.py): which polls of a gang restart show an old
Ray node alive beside a new one, or a node joining the old cluster."""

from __future__ import annotations

from kvbake_rig.gcs_polls import gang_down_seen, stop_order_failures, timeline


PORTS = {"h1": 41001, "w1": 41002, "h2": 42001, "w2": 42002}  # each raylet's node manager port


def poll(cluster: str | None, nodes: dict[str, bool], up: tuple[str, ...] = (), ports: dict[str, int] = PORTS,
         gcs_up: bool | None = None) -> dict:
    """One poll; its GCS port answered when it read a cluster, unless `gcs_up` says otherwise."""
    listed = {node: {"ip": "127.0.0.2", "port": ports[node], "alive": state} for node, state in nodes.items()}
    return {**({"cluster": cluster, "nodes": listed} if cluster else {}), "raylets_up": list(up),
            "gcs_up": cluster is not None if gcs_up is None else gcs_up}


def probe(gcs_up: bool, up: tuple[str, ...] = ()) -> dict:
    return {"probe": True, "gcs_up": gcs_up, "raylets_up": list(up)}


OLD = poll("c1", {"h1": True, "w1": True}, ("h1", "w1"))
NEW = poll("c2", {"h2": True, "w2": True}, ("h2", "w2"))


def test_a_gang_that_stopped_before_the_new_one_started_passes():
    polls = [OLD, poll(None, {}, ("w1",)), poll(None, {}), poll("c2", {"h2": True}, ("h2",)), NEW]
    assert stop_order_failures(OLD, NEW, polls) == []


def test_an_old_worker_that_answers_while_the_new_head_is_listed_fails():
    polls = [OLD, poll(None, {}, ("w1",)), poll("c2", {"h2": True}, ("w1", "h2")), NEW]
    assert stop_order_failures(OLD, NEW, polls) == ["old Ray node(s) ['w1'] answered while the new cluster c2 listed ['h2']"]


def test_a_new_worker_that_joined_the_old_head_fails():
    polls = [OLD, poll("c1", {"h1": True, "w1": False, "w2": True}, ("h1", "w2")), poll(None, {}), NEW]
    assert stop_order_failures(OLD, NEW, polls) == ["node(s) ['w2'] joined the old cluster c1"]


def test_a_new_cluster_that_lists_an_old_node_or_lacks_a_node_fails():
    mixed = poll("c2", {"h2": True, "w1": False})
    failures = stop_order_failures(OLD, mixed, [OLD, poll(None, {}), mixed])
    assert failures == ["old node(s) ['w1'] registered with the new cluster c2",
                        "the new cluster's node table is not two alive nodes: " + str(mixed["nodes"])]


def test_an_answer_on_the_port_a_new_node_now_holds_is_that_new_node_s():
    """Ray takes its node manager port from the kernel, which may hand a new raylet the port an old one just freed: the
    watch's connection then reaches the new raylet, which is listed at that address."""
    reused = {**PORTS, "w2": PORTS["w1"]}
    new = poll("c2", {"h2": True, "w2": True}, ("h2", "w2"), reused)
    polls = [OLD, poll(None, {}), poll("c2", {"h2": True}, ("w1", "h2"), reused), poll("c2", {"h2": True, "w2": True}, ("w1", "h2", "w2"), reused), new]
    assert stop_order_failures(OLD, new, polls) == [], "w2 listens on w1's old port before the GCS lists it, then is listed there"
    elsewhere = poll("c2", {"h2": True, "w2": True}, ("w1", "h2", "w2"))
    assert stop_order_failures(OLD, NEW, [OLD, elsewhere, NEW]) == ["old Ray node(s) ['w1'] answered while the new cluster c2 listed ['h2', 'w2']"]


def test_the_gang_was_seen_down_only_in_a_poll_without_a_gcs_where_no_old_raylet_answered():
    assert gang_down_seen(NEW, [OLD, poll(None, {}, ("w1",)), poll(None, {}), NEW])
    assert not gang_down_seen(NEW, [OLD, poll(None, {}, ("w1",)), NEW]), "w1 still answered in the only poll without a GCS"
    assert not gang_down_seen(NEW, [OLD, NEW]), "no poll fell between the two clusters"
    reused = {**PORTS, "h2": PORTS["w1"]}
    new = poll("c2", {"h2": True, "w2": True}, ("h2", "w2"), reused)
    assert gang_down_seen(new, [OLD, poll(None, {}, ("w1",)), new]), "the answer on w1's old port was the new head's"


def test_the_gang_was_seen_down_only_where_the_gcs_port_itself_was_closed():
    read_failed = poll(None, {}, gcs_up=True)  # the port answered, the read of its table did not come back in time
    assert not gang_down_seen(NEW, [OLD, read_failed, NEW])
    assert gang_down_seen(NEW, [OLD, read_failed, probe(False), NEW]), "a probe between two polls saw the gap"
    assert not gang_down_seen(NEW, [OLD, probe(False, ("w1",)), probe(True), NEW]), "w1 answered while the port was closed"


def test_probe_lines_are_no_cluster_and_no_failure_of_the_stop_order():
    polls = [OLD, probe(True, ("h1", "w1")), probe(False, ("w1",)), probe(False), probe(True, ("h2",)), NEW]
    assert stop_order_failures(OLD, NEW, polls) == [] and gang_down_seen(NEW, polls)


def test_the_timeline_shows_each_poll_s_offset_cluster_gcs_port_alive_nodes_and_answering_raylets():
    polls = [{**OLD, "t": 10.0}, {**poll(None, {}, ("w1",)), "t": 10.5}, {**probe(False), "t": 10.55}, {**NEW, "t": 12.25}]
    assert timeline(polls) == ("+0.00s c1 gcs=up alive=2 raylets=2; +0.50s - gcs=down alive=0 raylets=1; "
                               "+0.55s probe gcs=down alive=0 raylets=0; +2.25s c2 gcs=up alive=2 raylets=2")
