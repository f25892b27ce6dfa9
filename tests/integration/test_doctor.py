"""`doctor` on real engines: every check passes on the rig; a node that is down or lacks the base is one FAIL line,
and the exit code is that failure's."""

from __future__ import annotations

import json
import re

import pytest

from kvbake.engine import Engine
from kvbake.rig import NodeEngine

from conftest import run
from shiprig import BASE, STANDIN_LAUNCHER, write_deploy

pytestmark = pytest.mark.docker


def doctor(capsys, shipped, rig, deploy_file, *extra):
    return run(capsys, "doctor", "--manifest", str(shipped["manifest"]), "--deploy", str(deploy_file), "--registry",
               rig["registry"].address, "--disk-floor", "0.1", "--mem-floor", "0.1", *extra)


def test_every_check_passes_on_the_rig(capsys, shipped, rig, tmp_path):
    code, out, err = doctor(capsys, shipped, rig, shipped["deploy"], "--json")
    assert code == 0, out + err
    checks = {c["check"]: c for c in json.loads(out)["checks"]}
    assert set(checks) == {"engine", "registry", "free disk (here)", "node spark-a", "base on spark-a", "memory, disk spark-a",
                           "node spark-b", "base on spark-b", "memory, disk spark-b"}
    assert all(c["verdict"] == "ok" for c in checks.values())
    assert "plain HTTP (loopback only)" in checks["registry"]["seen"] and "MemAvailable" in checks["memory, disk spark-b"]["seen"]
    assert BASE in checks["base on spark-a"]["seen"]


def test_a_node_without_the_base_fails_its_line_and_the_run(capsys, shipped, rig, tmp_path):
    with NodeEngine(tmp_path / "c", name="c") as bare:
        document = json.loads(shipped["deploy"].read_text())
        document["nodes"][1]["host"] = bare.host
        deploy_file = tmp_path / "deploy.yaml"
        deploy_file.write_text(json.dumps(document))
        code, out, err = doctor(capsys, shipped, rig, deploy_file)
    assert code == 6, out + err
    assert re.search(rf"^FAIL +base on spark-b +spark-b lacks {re.escape(BASE)}; fix: run python build\.py base sync$", out, re.MULTILINE), out
    assert err.startswith("error (base image): doctor: 1 check(s) failed, first: base on spark-b") and err.count("\n") == 1


def test_an_unreachable_node_is_named(capsys, shipped, rig, tmp_path):
    deploy_file = write_deploy(tmp_path, {**rig, "b_host": f"unix://{tmp_path}/gone.sock"}, STANDIN_LAUNCHER)
    code, out, err = doctor(capsys, shipped, rig, deploy_file)
    assert code == 12 and "FAIL  node spark-b" in out and "is unreachable" in out, out + err
    assert Engine(rig["a"].host).ping()
