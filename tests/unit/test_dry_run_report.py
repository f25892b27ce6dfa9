"""The dry run's report, text and data: the release it would deploy, then every node in start order with its launcher
command, variables, switches file lines and printed engine calls (or that there were none)."""

from __future__ import annotations

from fake_fleet import PACKING
from kvbake.serve.core.runtime_config import ENV_FILE
from kvbake.ship.adapters.dry_run import NodeDryRun, report_data, report_text

WORKER = NodeDryRun("spark-b", "worker", ("launch", "--shape", "main"), {"KVBAKE_NODE_RANK": "1", "B_VAR": "b", "A_VAR": "a"},
                    ("S=3",), ("docker run --name vllm-serve x", "docker start vllm-serve"))
HEAD = NodeDryRun("spark-a", "head", ("launch",), {"KVBAKE_NODE_RANK": "0"}, (), ())


def test_the_text_heads_with_the_release_then_every_node_block_in_order():
    lines = report_text(PACKING, [WORKER, HEAD]).splitlines()
    assert lines[0].startswith(f"dry run: deploy of release {PACKING.id} (packing, max-model-len 4096), image {PACKING.image}")
    assert lines[0].endswith("nothing was changed")
    assert lines[1] == "spark-b (worker, rank 1): launch --shape main --print"
    assert lines[2:6] == ["  variables:", "    A_VAR=a", "    B_VAR=b", "    KVBAKE_NODE_RANK=1"]
    assert lines[6:8] == [f"  {ENV_FILE} (switches):", "    S=3"]
    assert lines[8:11] == ["  engine calls:", "    docker run --name vllm-serve x", "    docker start vllm-serve"]
    assert lines[11] == "spark-a (head, rank 0): launch --print"
    assert lines[14:] == [f"  {ENV_FILE} (switches):", "    (none)", "  engine calls:", "    (the launcher printed none)"]


def test_the_data_names_the_release_and_each_nodes_command_with_the_print_flag():
    data = report_data(PACKING, [WORKER, HEAD])
    assert (data["dry_run"], data["release"], data["image"], data["preset"]) == (True, PACKING.id, PACKING.image, "packing")
    assert data["nodes"][0] == {"node": "spark-b", "role": "worker", "command": ["launch", "--shape", "main", "--print"],
                                "variables": WORKER.variables, "ranks_env": ["S=3"],
                                "calls": ["docker run --name vllm-serve x", "docker start vllm-serve"]}
    assert [(n["node"], n["command"], n["ranks_env"], n["calls"]) for n in data["nodes"][1:]] == [("spark-a", ["launch", "--print"], [], [])]
