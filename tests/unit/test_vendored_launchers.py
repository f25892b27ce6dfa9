"""The community launchers in tests/launchers are their authors' files, byte for byte: every file is pinned here."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

LAUNCHERS = Path(__file__).resolve().parents[1] / "launchers"
PINNED = {
    "eugr/LICENSE": "2bbd5f7fe8719e5de6b8376f277f9f6db7f9b9582fd9d364cc94178f81b6d279",
    "eugr/autodiscover.sh": "d0a178d3f00755270030a593fc10be8d5c5bc4f08c1cf2ed4c586928982cb0e3",
    "eugr/launch-cluster.sh": "b2513f82ea2998e7e39ecaf8dbc3f69fc76cb19cecd98bcfd390f9a603a419db",
    "eugr/mods/fix-Salyut1-GLM-4.7-NVFP4/glm4_moe.patch": "ef1ad0cc9eab83fbd34d62a5f7e9363d4d9a6e93b6afe71ee00b32dd5ff342ae",
    "eugr/mods/fix-Salyut1-GLM-4.7-NVFP4/run.sh": "b6e4333476ae659a3f45d968fc0867fcb22cb7c7ec200d40a6dffa885d8ee2be",
    "eugr/run-cluster-node.sh": "694026859590def08c52cf89737777d3586a0fad24456f58eb6b15b9f3278775",
    "vllm/LICENSE": "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30",
    "vllm/run_cluster.sh": "83c9b38225dd13f74f97a1c3447c2b92cd6f5f8ed69e9e571c5a5f0bd0b9c180",
}
EXECUTABLE = ("eugr/autodiscover.sh", "eugr/launch-cluster.sh", "eugr/run-cluster-node.sh",
              "eugr/mods/fix-Salyut1-GLM-4.7-NVFP4/run.sh", "vllm/run_cluster.sh")


def test_every_launcher_file_is_the_upstream_one_and_nothing_else_is_there():
    found = {path.relative_to(LAUNCHERS).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
             for path in LAUNCHERS.rglob("*") if path.is_file() and path.name != "README.md"}
    assert found == PINNED


def test_the_scripts_keep_their_executable_bit():
    assert all(os.access(LAUNCHERS / name, os.X_OK) for name in EXECUTABLE)
