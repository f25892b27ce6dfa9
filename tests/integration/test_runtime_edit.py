"""A preset edit on real nodes needs no re-lock, no rebuild and no push: the same image is deployed with the new
runtime settings, and `config --check --deploy` says when what runs differs from the manifest."""

from __future__ import annotations

import json
import shutil

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.ship.adapters.nodestate import NodeState

from conftest import run
from shiprig import CONTAINER, STANDIN_LAUNCHER, write_deploy

pytestmark = pytest.mark.docker
BEFORE = '''    max_model_len: 327680
    switches:
      VLLM_DSV41_KV_PAIR: "3"'''
AFTER = '''    max_model_len: 327680
    launcher_args: ["--enable-prompt-tokens-details", "--served-model-name", "dsv41 packed"]
    switches:
      VLLM_DSV41_KV_PAIR: "3"'''


def test_a_preset_edit_is_deployed_without_a_rebuild_and_drift_is_named(capsys, shipped, rig, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(shipped["manifest"].parent, project, ignore=shutil.ignore_patterns("deploy", "configs"))
    manifest = project / "manifest.yaml"
    deploy_file = write_deploy(project, rig, STANDIN_LAUNCHER)
    lock_before = (project / "manifest.lock.json").read_bytes()

    def kvbake(*argv: str) -> tuple[int, str, str]:
        return run(capsys, *argv, "--manifest", str(manifest), "--deploy", str(deploy_file))

    assert kvbake("deploy", "--preset", "packing-327680", "--reason", "before the edit")[0] == 0
    image = NodeState("spark-a", Engine(rig["a"].host)).read().current.image
    text = manifest.read_text()
    assert text.count(BEFORE) >= 1
    manifest.write_text(text.replace(BEFORE, AFTER, 1).replace('note: "stand-in of the validated packing candidate',
                                                               'note: "reviewed again: stand-in of the validated packing candidate', 1))
    assert run(capsys, "plan", "--manifest", str(manifest))[0] == 0, "the lock still matches: no re-lock"
    code, _, err = kvbake("config", "--check")
    assert code == 7 and "what runs drifts from the manifest's runtime settings" in err and "launcher_args" in err, err
    code, out, err = kvbake("deploy", "--preset", "packing-327680", "--reason", "runtime edit")
    assert code == 0, err
    current = NodeState("spark-b", Engine(rig["b"].host)).read().current
    assert current.image == image and current.launcher_args == ("--enable-prompt-tokens-details", "--served-model-name", "dsv41 packed")
    labels = Engine(rig["b"].host).container_inspect(CONTAINER)["Config"]["Labels"]
    assert json.loads(labels["kvbake.launcher-args"])[-1] == "dsv41 packed", "each argument arrives whole"
    assert kvbake("config", "--check")[0] == 0
    assert (project / "manifest.lock.json").read_bytes() == lock_before
