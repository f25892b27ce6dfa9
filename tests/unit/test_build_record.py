"""The build record: each field from what the build produced, the record's file named by the image's tag, and no
credential ever written."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from kvbake import __version__
from kvbake.bake.core import build_record as module
from kvbake.bake.core.build_record import RECORDS_DIR, build_record, write_json_record, write_record
from kvbake.errors import IntegrityError


def built(expected=True) -> SimpleNamespace:
    lock = SimpleNamespace(manifest_sha256="m" * 64, core_sha256=lambda: "l" * 64)
    plan = SimpleNamespace(layer=SimpleNamespace(diff_id="sha256:" + "d" * 64), lock=lock)
    profile = SimpleNamespace(to_json=lambda: {"name": "docker-26.1-containerd"})
    return SimpleNamespace(plan=plan, reference="reg/kvpack:tag-1", image_id="sha256:" + "i" * 64, config_digest="sha256:" + "c" * 64,
                           expected=SimpleNamespace(profile=profile) if expected else None, archive_bytes=4096,
                           timings={"assemble": 0.5})


def test_the_record_names_the_image_the_engine_the_layer_the_inputs_and_who_built_it(monkeypatch):
    monkeypatch.setattr(module, "plan_summary", lambda plan: {"summary": "of the plan"})
    monkeypatch.setattr(module.getpass, "getuser", lambda: "ops")
    monkeypatch.setattr(module.socket, "gethostname", lambda: "build-host")
    record = build_record(built(), "kvbake")
    stamp = record.pop("built_at")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    assert record == {"kvbake": __version__, "builder": "kvbake", "image": "reg/kvpack:tag-1", "image_id": "sha256:" + "i" * 64,
                      "config_digest": "sha256:" + "c" * 64, "engine": {"name": "docker-26.1-containerd"},
                      "layer_diff_id": "sha256:" + "d" * 64, "archive_bytes": 4096, "manifest_sha256": "m" * 64,
                      "lock_sha256": "l" * 64, "built_by": "ops@build-host", "timings_s": {"assemble": 0.5},
                      "plan": {"summary": "of the plan"}}
    assert build_record(built(expected=False), "docker")["engine"] is None


def test_the_record_file_is_named_by_the_tag_and_written_whole(tmp_path):
    path = write_record(tmp_path, {"image": "reg:5000/kvbake/kvpack:0.33.0-kvpack-abc", "n": 1})
    assert path == tmp_path / RECORDS_DIR / "0.33.0-kvpack-abc.json"
    assert json.loads(path.read_text()) == {"image": "reg:5000/kvbake/kvpack:0.33.0-kvpack-abc", "n": 1}
    assert path.read_text().endswith("}\n") and [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_record_holding_a_credential_is_never_written(tmp_path):
    with pytest.raises(IntegrityError) as caught:
        write_json_record(tmp_path / "records", "reg/x:t", {"note": "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789"})
    assert caught.value.exit_code == 7 and not (tmp_path / "records").exists()
