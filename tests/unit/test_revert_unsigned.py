"""An interrupted deploy under a deployment file that came to require signatures after the release the nodes served
was deployed: `deploy --resume` to the new, unsigned release is refused naming the revert, and the revert it names,
run as printed, returns every node to the release it served before."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvbake.attest.adapters import admission
from kvbake.deployfile import PUBLIC_KEY_HEADER

from fake_fleet import CONTROL, PACKING, World, deploy, interrupted_deploy, make_world
from test_cli_recover import refused, run, settled


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def require_signatures(options: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deployment file now requires a reviewer's signature, and cosign verifies none for any image."""
    key = tmp_path / "reviewer.pub"
    key.write_text(f"{PUBLIC_KEY_HEADER}\nMFkw\n-----END PUBLIC KEY-----\n")
    deploy_file = Path(options[options.index("--deploy") + 1])
    document = json.loads(deploy_file.read_text())
    deploy_file.write_text(json.dumps({**document, "signing": {"require_signature": True, "keys": [str(key)]}}))
    monkeypatch.setattr(admission, "verified_signatures", lambda reference, key: "no signatures found")


def test_the_revert_a_refused_resume_prints_undoes_a_deploy_begun_before_signatures_were_required(world, tmp_path, monkeypatch, capsys):
    deploy(world, CONTROL)
    before = world.snapshot()
    interrupted_deploy(world, PACKING)
    options = world.command_line(monkeypatch)
    require_signatures(options, tmp_path, monkeypatch)
    world.advance(world.fleet.deployment.lock_stale_after_s)  # the dead host's lock goes stale
    interrupted = world.snapshot()
    code, _, err = run(capsys, "deploy", "--resume", "--break-lock", "--json", *options)
    assert code == 19 and PACKING.image in refused(err) and world.snapshot() == interrupted
    repair = re.search(r"python build\.py (deploy --revert)", err)
    assert repair, err
    code, answer, err = run(capsys, *repair.group(1).split(), "--break-lock", "--json", *options)
    assert code == 0, err
    assert answer["action"] == "reverted" and world.snapshot() == before and settled(world)
