"""init_project on stand-in node engines: the reviewers' signing keys given reach the deployment file written."""

from __future__ import annotations

from kvbake.ship.adapters.project_init import init_project
from kvbake.ship.core.init_documents import InitOptions
from test_project_init_nodes import nodes, pair, written  # noqa: F401  (fixture: stand-in node engines)


def test_the_signing_keys_given_are_the_keys_the_deployment_requires(nodes, tmp_path):
    pair(nodes)
    keys = ("reviewers/alice.pub", "reviewers/bob.pub")
    init_project([("spark-a", "ssh://ops@spark-a"), ("spark-b", "ssh://ops@spark-b")], {}, tmp_path, None,
                 InitOptions(signing_keys=keys), force=False)
    assert written(tmp_path, "deploy.yaml")["signing"] == {"require_signature": True, "keys": list(keys)}
