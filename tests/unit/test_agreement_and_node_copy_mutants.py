"""A Ray worker rank runs no vLLM serve of its own, yet must hold the serving rank's layers; the journal every node
keeps records no progress, whatever the journal it was made from had done."""

from __future__ import annotations

from kvbake.ship.core.journal import Journal, NodePlan, journal_from_dict, node_copy
from kvbake.ship.core.running import agreement_failures
from kvbake.serve.core.serve_reading import RAY_WORKER

LAYERS = ("sha256:base", "sha256:thin")
SERVE = ((("VLLM_A", "1"),), "/models/m", (("--max-model-len", ("4096",)),))


def test_a_ray_worker_rank_on_other_layers_disagrees_with_the_serving_rank():
    assert agreement_failures({"head": (LAYERS, (SERVE,)), "worker": (LAYERS, RAY_WORKER)}) == []
    failures = agreement_failures({"head": (LAYERS, (SERVE,)), "worker": (LAYERS[:1], RAY_WORKER)})
    assert len(failures) == 1 and "the ranks disagree" in failures[0]


def test_the_nodes_copy_of_a_journal_records_no_progress():
    plan = NodePlan("a", None, None, "sha256:new", None, {}, {})
    journal = Journal("deploy-1", "deploy", "r1", (plan,), done=("after:retag:a", "after:restart:a"), phase="forward")
    copy = journal_from_dict(node_copy(journal))
    assert copy.done == () and copy.phase == "planned" and copy.nodes == journal.nodes
