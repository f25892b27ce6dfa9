"""Node and container names: the deployment file's node rule and Docker's container rule, the same in the schema and on
the command line, so that a name with shell metacharacters never reaches a container name, a file or an audit line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.cli import main
from kvbake.names import CONTAINER_NAME, NODE_NAME

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "kvbake" / "schema" / "deploy.schema.json").read_text())


def test_the_command_line_and_the_deployment_file_hold_one_rule():
    node = SCHEMA["properties"]["nodes"]["items"]["properties"]
    assert node["name"]["pattern"] == NODE_NAME.pattern
    assert node["container"]["pattern"] == CONTAINER_NAME.pattern == SCHEMA["properties"]["launcher"]["properties"]["container"]["pattern"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--node", "a;rm -rf /=unix:///x.sock"], "--node names the node 'a;rm -rf /', which is not a node name"),
    (["--node", "Spark-A=unix:///x.sock"], "--node names the node 'Spark-A', which is not a node name"),
    (["--node", "a=unix:///x.sock", "--container", "a=$(reboot)"], "--container names the container '$(reboot)', which Docker does not accept"),
    (["--node", "a=unix:///x.sock", "--container=a=.x"], "--container names the container '.x'"),
])
def test_init_refuses_a_name_docker_or_the_deployment_file_would_refuse_before_reading_any_node(argv, message, tmp_path, capsys):
    assert main(["init", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
