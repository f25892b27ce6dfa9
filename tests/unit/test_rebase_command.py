"""`rebase --to` and `rebase --accept` on a copy of the stand-in over a fake engine: report, candidate, refusals, accept."""

from __future__ import annotations

import errno
import io
import json
import shutil
import sys
import xml.etree.ElementTree as ET
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake.bake.adapters import pinning
from kvbake.errors import BaseImageError, LockError, PatchError, RebaseError, UsageError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.rebase import commands
from kvbake.rebase.adapters.rebaser import old_chain

from message_words import says
from tests.unit.bake_engine import BakeEngine, layer_tar

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TARGET = "kvbake-standin/vllm-base:0.34.0"
TENSOR = "exllamav3/util/tensor.py"
WORKER = "vllm/v1/worker/gpu_worker.py"


def new_base_files(manifest, lock) -> dict[str, bytes | None]:
    """The lock's base files, but tensor.py with an upstream edit on a line 0077 needs (a conflict) and lines added above
    its second hunk (an offset; one reads a new switch), and no gpu_worker.py."""
    base, _ = old_chain(manifest, lock)
    new = dict(base)
    lines = new[TENSOR].decode().splitlines(keepends=True)
    lines[1] = "import torch  # upstream\n"
    lines[100:100] = ["# upstream one\n", "UPSTREAM = os.environ.get('VLLM_UPSTREAM_NEW')\n"]
    new[TENSOR] = "".join(lines).encode()
    new[WORKER] = None
    return new


def engine_holding(new: dict[str, bytes | None], source_root: str) -> BakeEngine:
    engine = BakeEngine()
    engine.add_image(TARGET, {"architecture": "amd64", "os": "linux"},
                     [layer_tar([(f"{source_root.strip('/')}/{path}", data, 0o644) for path, data in new.items() if data is not None])])
    return engine


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> SimpleNamespace:
    """The stand-in copied once, the new base's files, and one rebase of it onto them (rebasing takes seconds)."""
    root = tmp_path_factory.mktemp("pristine") / "standin"
    shutil.copytree(EXAMPLES / "standin", root, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = load_manifest(root / "manifest.yaml")
    lock = read_lock(manifest)
    new = new_base_files(manifest, lock)
    rebased = tmp_path_factory.mktemp("rebased") / "standin"
    shutil.copytree(root, rebased)
    engine = engine_holding(new, lock.source_root)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(commands, "Engine", lambda host: engine)
        data, text = commands.cmd_rebase(Namespace(manifest=rebased / "manifest.yaml", host=None, to=TARGET, out=None, accept=None, json=True))
    return SimpleNamespace(root=root, new=new, rebased=rebased, data=data, text=text, engine=engine)


@pytest.fixture()
def project(pristine, tmp_path, monkeypatch) -> SimpleNamespace:
    """A fresh copy of the stand-in over an engine that holds the new base."""
    root = tmp_path / "standin"
    shutil.copytree(pristine.root, root)
    manifest = load_manifest(root / "manifest.yaml")
    lock = read_lock(manifest)
    engine = engine_holding(pristine.new, lock.source_root)
    monkeypatch.setattr(commands, "Engine", lambda host: engine)
    return SimpleNamespace(root=root, manifest=manifest, lock=lock, engine=engine, new=pristine.new, monkeypatch=monkeypatch,
                           patches={p.id: p.path.read_bytes() for p in manifest.chain}, manifest_text=(root / "manifest.yaml").read_text())


def rebase_to(project, target: str = TARGET, out: Path | None = None):
    return commands.cmd_rebase(Namespace(manifest=project.root / "manifest.yaml", host=None, to=target, out=out, accept=None, json=True))


def test_the_report_counts_every_hunk_names_the_patches_that_need_a_person_and_writes_the_candidate(pristine):
    data, text = pristine.data, pristine.text
    project = SimpleNamespace(root=pristine.rebased, engine=pristine.engine, lock=read_lock(load_manifest(pristine.rebased / "manifest.yaml")))
    assert data["counts"] == {"clean": 24, "offset": 1, "merged": 0, "conflict": 3} and data["needs_person"] == ["0076", "0077"]
    assert (data["from"], data["to"]["image"]) == ({"image": project.lock.base.reference, "config_digest": project.lock.base.config_digest}, TARGET)
    config = project.engine.config_digest_of(project.engine.inspect_image(TARGET), TARGET)
    assert data["to"]["config_digest"] == config
    out = project.root / f"rebase-{config.split(':')[1][:12]}"
    assert data["candidate"] == str(out)
    states = {f["path"]: f["state"] for f in data["files"]}
    assert states[TENSOR] == "changed" and states[WORKER] == "gone" and states["vllm/models/deepseek_v41/kv_pack.py"] == "absent"
    assert states["vllm/envs.py"] == "unchanged"
    tensor = next(p for p in data["patches"] if p["id"] == "0077")
    assert [(h["number"], h["status"]) for h in tensor["hunks"]] == [(1, "conflict"), (2, "offset")]
    assert tensor["hunks"][1]["offset"] == 1, "two lines added upstream, one the rejected first hunk did not add"
    assert "24 clean, 1 offset, 0 merged, 3 conflicted hunks" in text and "needs a person: 0076, 0077" in text and str(out) in text
    assert data["new_switches"] == ["VLLM_UPSTREAM_NEW"] and data["unread_switches"] == []
    # the candidate folder: this test is the one the module's single rebase runs under, so it checks what it wrote
    out = Path(data["candidate"])
    manifest = load_manifest(pristine.rebased / "manifest.yaml")
    for patch in manifest.chain:
        assert (out / patch.file).is_file()
    assert (out / manifest.chain[0].file).read_bytes() == (EXAMPLES / "standin" / manifest.chain[0].file).read_bytes(), \
        "a clean patch comes back byte for byte"
    record = json.loads((out / "rebase.json").read_text())
    assert record == {"manifest": str((pristine.rebased / "manifest.yaml").resolve()), "target": TARGET, "target_config": data["to"]["config_digest"],
                      "base_config": read_lock(manifest).base.config_digest, "chain": [p.id for p in manifest.chain],
                      "needs_person": ["0076", "0077"], "paths": {p["id"]: [f["path"] for f in p["files"]] for p in data["patches"]}}
    assert (out / "report.json").read_text() == json.dumps({k: v for k, v in data.items() if k != "candidate"}, indent=2) + "\n"
    assert (out / "rebase.json").read_text() == json.dumps(record, indent=2) + "\n"
    assert "## 0077: conflict" in (out / "report.md").read_text()
    page = ET.fromstring((out / "report.html").read_text())
    side = [t for t in page.iter("{http://www.w3.org/1999/xhtml}table") if t.get("class") == "side"]
    assert len(side) == len(data["patches"]), "a side-by-side table per patch"
    assert "both sides change these lines" in "".join(page.itertext()) and "<<<<<<<" not in "".join(page.itertext())
    resolve = out / "resolve" / "0077"
    assert b"<<<<<<< new base\nimport torch  # upstream\n" in (resolve / TENSOR).read_bytes()
    assert (resolve / ".before" / TENSOR).read_bytes() == pristine.new[TENSOR]
    assert (out / "resolve" / "0076" / ".before" / "vllm/v1/worker/workspace.py").is_file()
    assert not (out / "resolve" / "0051").exists() and not list(out.parent.glob(".kvbake-rebase-*"))
    assert (pristine.rebased / "manifest.yaml").read_text() == (EXAMPLES / "standin" / "manifest.yaml").read_text()
    assert {p.id: p.path.read_bytes() for p in manifest.chain} == {p.id: (EXAMPLES / "standin" / p.file).read_bytes() for p in manifest.chain}


def test_the_candidate_goes_where_out_says_or_beside_the_manifest_but_never_over_a_folder_or_patches(project, tmp_path):
    config = "sha256:" + "0123456789ab" * 5 + "cdef"
    assert commands.candidate_folder(project.manifest, None, config) == project.root / "rebase-0123456789ab"
    assert commands.candidate_folder(project.manifest, tmp_path / "chosen", config) == tmp_path / "chosen"
    (tmp_path / "chosen").mkdir()
    with pytest.raises(UsageError, match="already exists") as caught:
        rebase_to(project, out=tmp_path / "chosen")
    assert caught.value.exit_code == 2 and caught.value.fix.startswith("remove it, or give another folder")
    with pytest.raises(UsageError, match="already exists"):
        commands.candidate_folder(project.manifest, project.root / "patches", config)


def test_out_naming_patches_itself_is_refused_before_anything_is_written(project, monkeypatch):
    (project.root / "patches-link").symlink_to(project.root / "patches")
    monkeypatch.setattr(commands.Path, "exists", lambda self: False)
    with pytest.raises(UsageError, match="names patches/ itself") as caught:
        commands.candidate_folder(project.manifest, project.root / "patches-link", "sha256:" + "1" * 64)
    assert caught.value.fix.startswith("give a new folder")


def test_out_goes_with_to_and_not_with_accept(project, tmp_path):
    with pytest.raises(UsageError, match="--out goes with --to") as caught:
        commands.cmd_rebase(Namespace(manifest=project.root / "manifest.yaml", host=None, to=None, out=tmp_path, accept=tmp_path, json=True))
    assert caught.value.fix == "drop --out"


def test_a_target_that_is_absent_of_another_platform_or_the_base_itself_is_refused(project):
    with pytest.raises(BaseImageError, match="is not on unix:///bake.sock") as caught:
        rebase_to(project, "absent:1")
    assert caught.value.exit_code == 6 and caught.value.fix.startswith("pull or load it yourself (docker pull --platform linux/amd64 absent:1)")
    project.engine.add_image("arm:1", {"architecture": "arm64", "os": "linux"}, [layer_tar([("x", b"x", 0o644)])])
    with pytest.raises(BaseImageError, match="is linux/arm64, the locked base is linux/amd64") as caught:
        rebase_to(project, "arm:1")
    assert caught.value.fix.startswith("pull the target for linux/amd64")
    project.engine._profile = project.engine._profile.__class__("26.1.5", "containerd", "overlayfs")
    same = project.engine.image_id_of(TARGET)
    project.engine.configs[same] = project.lock.base.config_digest
    with pytest.raises(BaseImageError, match="is the locked base itself") as caught:
        rebase_to(project)
    assert caught.value.fix.startswith("name the new base image")


def test_a_target_without_any_file_the_chain_edits_is_refused(project):
    project.engine.add_image("other:1", {"architecture": "amd64", "os": "linux"}, [layer_tar([("usr/other.py", b"x", 0o644)])])
    with pytest.raises(BaseImageError, match="holds none of the chain's files under /usr/local/lib/python3.11/dist-packages") as caught:
        rebase_to(project, "other:1")
    assert caught.value.fix.startswith("rebase onto an image of the same layout")
    assert not list(project.root.glob("rebase-*"))


def resolve(out: Path) -> None:
    """What a person does: 0077's tensor.py edited to keep both lines, 0076's gpu_worker.py dropped from its patch."""
    edited = out / "resolve" / "0077" / TENSOR
    text = edited.read_text()
    start, end = text.index("<<<<<<< new base\n"), text.index(">>>>>>> old patched\n") + len(">>>>>>> old patched\n")
    edited.write_text(text[:start] + "import os\nimport torch  # upstream\n" + text[end:])
    (out / "resolve" / "0076" / WORKER).unlink(missing_ok=True)


def accept(project, folder: Path, lock=None):
    calls = []

    def create_lock(engine, manifest, rebase):
        calls.append((engine, manifest.base.image, rebase))
        if isinstance(lock, Exception):
            raise lock
        return lock or SimpleNamespace(base=SimpleNamespace(config_digest="sha256:" + "c" * 64), derived=SimpleNamespace(image_id="sha256:" + "d" * 64))
    project.monkeypatch.setattr(pinning, "create_lock", create_lock)
    result = commands.cmd_rebase(Namespace(manifest=project.root / "manifest.yaml", host=None, to=None, out=None, accept=folder, json=True))
    return result, calls


@pytest.fixture()
def rebased(pristine, tmp_path, monkeypatch) -> SimpleNamespace:
    """A fresh copy of the rebased stand-in, its candidate's record naming the copy's manifest."""
    root = tmp_path / "standin"
    shutil.copytree(pristine.rebased, root)
    out = root / Path(pristine.data["candidate"]).name
    record = json.loads((out / "rebase.json").read_text())
    (out / "rebase.json").write_text(json.dumps({**record, "manifest": str((root / "manifest.yaml").resolve())}))
    manifest = load_manifest(root / "manifest.yaml")
    engine = engine_holding(pristine.new, read_lock(manifest).source_root)
    monkeypatch.setattr(commands, "Engine", lambda host: engine)
    return SimpleNamespace(root=root, manifest=manifest, engine=engine, out=out, monkeypatch=monkeypatch,
                           patches={p.id: p.path.read_bytes() for p in manifest.chain}, manifest_text=(root / "manifest.yaml").read_text())


def test_accepting_regenerates_the_resolved_patches_points_the_manifest_and_locks(rebased):
    resolve(rebased.out)
    (data, text), calls = accept(rebased, rebased.out)
    assert calls == [(rebased.engine, TARGET, True)]
    assert data["base"] == TARGET and data["replaced"] == ["0076", "0077"]
    assert data["lock"] == {"base_config_digest": "sha256:" + "c" * 64, "image_id": "sha256:" + "d" * 64}
    assert "-  image: kvbake-standin/vllm-base:0.33.0\n+  image: kvbake-standin/vllm-base:0.34.0\n" in data["manifest_diff"]
    assert load_manifest(rebased.root / "manifest.yaml").base.image == TARGET
    patches = {p.id: p.path.read_text() for p in rebased.manifest.chain}
    assert "diff --git a/vllm/v1/worker/gpu_worker.py" not in patches["0076"] and "vllm/v1/worker/workspace.py" in patches["0076"]
    assert "+import os\n import torch  # upstream\n" in patches["0077"] and "<<<<<<<" not in patches["0077"]
    assert patches["0077"].startswith(rebased.patches["0077"].decode()[:200]), "the patch keeps its header"
    for same in ("0051", "0053", "0057", "0059", "0060"):
        assert patches[same].encode() == rebased.patches[same]
    assert "2 patch(es) replaced" in text and "sha256:cccccccccccc" in text and "sha256:dddddddddddd" in text


def test_a_failing_lock_puts_the_manifest_and_every_patch_back(rebased):
    resolve(rebased.out)
    with pytest.raises(LockError):
        accept(rebased, rebased.out, lock=LockError("the base moved", "retry"))
    assert (rebased.root / "manifest.yaml").read_text() == rebased.manifest_text
    assert {p.id: p.path.read_bytes() for p in rebased.manifest.chain} == rebased.patches


def test_a_marker_left_in_a_resolve_file_or_in_a_refreshed_patch_is_refused(rebased):
    (rebased.out / "resolve" / "0076" / WORKER).unlink()
    with pytest.raises(RebaseError, match=r"still holds conflict markers \(lines 2, 4, 7\)") as caught:
        accept(rebased, rebased.out)
    assert caught.value.exit_code == 18 and TENSOR in caught.value.message and caught.value.fix.startswith("resolve them in that file")
    resolve(rebased.out)
    clean = rebased.out / rebased.manifest.chain[0].file
    clean.write_text(clean.read_text() + "+<<<<<<< new base\n")
    with pytest.raises(RebaseError, match="0051.*still holds conflict markers") as caught:
        accept(rebased, rebased.out)
    assert caught.value.fix.startswith("resolve them, then accept again")
    assert (rebased.root / "manifest.yaml").read_text() == rebased.manifest_text


def rewrite_record(out: Path, **changes) -> None:
    record = json.loads((out / "rebase.json").read_text())
    (out / "rebase.json").write_text(json.dumps({**record, **changes}))


def test_a_candidate_for_another_manifest_chain_or_lock_or_a_moved_target_is_stale(rebased):
    record = json.loads((rebased.out / "rebase.json").read_text())
    for changes, words, fix in (({"manifest": "/elsewhere/manifest.yaml"}, "was made for /elsewhere/manifest.yaml", "run python build.py rebase --to IMAGE:TAG for this"),
                                ({"chain": ["0051"]}, "and its chain", "run python build.py rebase --to IMAGE:TAG for this"),
                                ({"base_config": "sha256:" + "e" * 64}, "made from the lock of base sha256:eeeeeeeeeeee", "run python build.py rebase --to IMAGE:TAG again"),
                                ({"target_config": "sha256:" + "f" * 64}, "now names config", f"run python build.py rebase --to {TARGET} again"),
                                ({"target": "gone:1"}, "gone:1 is not on the engine", "run python build.py rebase --to gone:1 again")):
        rewrite_record(rebased.out, **{**record, **changes})
        with pytest.raises(RebaseError, match=words) as caught:
            accept(rebased, rebased.out)
        assert caught.value.exit_code == 18 and caught.value.fix.startswith(fix)
    assert (rebased.root / "manifest.yaml").read_text() == rebased.manifest_text


@pytest.mark.parametrize("record", [None, "{half", "[]", '{"manifest": "m"}'], ids=["absent", "not-json", "a-list", "keys-missing"])
def test_a_folder_without_a_whole_record_is_not_a_candidate(project, tmp_path, record):
    folder = tmp_path / "not-a-candidate"
    folder.mkdir()
    if record is not None:
        (folder / "rebase.json").write_text(record)
    with pytest.raises(RebaseError) as caught:
        commands.cmd_rebase(Namespace(manifest=project.root / "manifest.yaml", host=None, to=None, out=None, accept=folder, json=True))
    assert caught.value.exit_code == 18 and caught.value.fix.startswith("give the folder rebase --to printed" if record in (None, "{half")
                                                                          else "run python build.py rebase --to IMAGE:TAG again")
    if record == '{"manifest": "m"}':
        assert "'base_config', 'chain', 'needs_person', 'paths', 'target', 'target_config'" in caught.value.message


def test_an_overlay_that_does_not_reverse_to_the_locked_base_is_a_lock_error(project):
    worker = project.root / "overlay" / WORKER
    worker.write_text(worker.read_text() + "# edited by hand\n")
    with pytest.raises(LockError) as caught:
        old_chain(project.manifest, project.lock)
    assert caught.value.exit_code == 4 and says(caught.value.message, f"overlay/{WORKER}")
    assert caught.value.fix.startswith("run python build.py lock to rewrite overlay/")


def test_accepting_on_a_terminal_prints_the_manifests_diff_and_the_replaced_patches_first(rebased, capsys):
    resolve(rebased.out)
    printed = []
    rebased.monkeypatch.setattr(pinning, "create_lock", lambda engine, manifest, rebase: printed.append(capsys.readouterr().out) or
                                SimpleNamespace(base=SimpleNamespace(config_digest="sha256:" + "c" * 64),
                                                derived=SimpleNamespace(image_id="sha256:" + "d" * 64)))
    commands.cmd_rebase(Namespace(manifest=rebased.root / "manifest.yaml", host=None, to=None, out=None, accept=rebased.out, json=False))
    (preview,) = printed
    assert preview.startswith("--- a/manifest.yaml\n+++ b/manifest.yaml\n")
    assert preview.endswith("replaced patches: 0076, 0077; the others stay byte for byte\n")


def test_a_candidate_is_written_beside_its_folder_and_one_that_cannot_be_written_whole_leaves_nothing(project, monkeypatch):
    renames = []

    def fail(source, target):
        renames.append((source, target, sorted(p.name for p in source.iterdir())))
        raise OSError("disk full")
    monkeypatch.setattr(commands, "rename_durably", fail)
    with pytest.raises(OSError):
        rebase_to(project)
    ((source, target, names),) = renames
    assert source.parent == target.parent == project.root and source.name.startswith(".kvbake-rebase-")
    assert names == ["patches", "rebase.json", "report.html", "report.json", "report.md", "resolve"]
    assert not list(project.root.glob("rebase-*")) and not list(project.root.glob(".kvbake-rebase-*"))


def test_the_engine_is_the_one_the_host_names(project, tmp_path):
    hosts = []
    project.monkeypatch.setattr(commands, "Engine", lambda host: hosts.append(host) or project.engine)
    with pytest.raises(BaseImageError):
        commands.cmd_rebase(Namespace(manifest=project.root / "manifest.yaml", host="ssh://box", to="absent:1", out=None, accept=None, json=True))
    with pytest.raises(RebaseError):
        commands.cmd_rebase(Namespace(manifest=project.root / "manifest.yaml", host="ssh://other", to=None, out=None, accept=tmp_path, json=True))
    assert hosts == ["ssh://box", "ssh://other"]


def test_a_target_holding_only_a_file_the_chain_creates_holds_none_of_the_files_it_edits(project):
    created = "vllm/models/deepseek_v41/kv_pack.py"
    project.engine.add_image("created-only:1", {"architecture": "amd64", "os": "linux"},
                             [layer_tar([(f"{project.lock.source_root.strip('/')}/{created}", b"x = 1\n", 0o644)])])
    with pytest.raises(BaseImageError) as caught:
        rebase_to(project, "created-only:1")
    assert says(caught.value.message, "created-only:1") and says(caught.value.message, "(the manifest's source root)")
    assert caught.value.fix.startswith("rebase onto an image of the same layout")


def test_the_locked_base_named_as_target_is_named_by_its_short_digest(project):
    project.engine._profile = project.engine._profile.__class__("26.1.5", "containerd", "overlayfs")
    project.engine.configs[project.engine.image_id_of(TARGET)] = project.lock.base.config_digest
    with pytest.raises(BaseImageError) as caught:
        rebase_to(project)
    assert says(caught.value.message, project.lock.base.config_digest[:19])


def test_a_stale_candidate_names_its_folder_and_each_digest_short(rebased):
    record = json.loads((rebased.out / "rebase.json").read_text())
    lock = read_lock(rebased.manifest)
    now = rebased.engine.config_digest_of(rebased.engine.inspect_image(TARGET), TARGET)
    rewrite_record(rebased.out, **{**record, "manifest": "/elsewhere/manifest.yaml"})
    with pytest.raises(RebaseError) as caught:
        accept(rebased, rebased.out)
    assert says(caught.value.message, str(rebased.out))
    rewrite_record(rebased.out, **{**record, "base_config": "sha256:" + "e" * 64})
    with pytest.raises(RebaseError) as caught:
        accept(rebased, rebased.out)
    assert says(caught.value.message, "sha256:" + "e" * 12) and says(caught.value.message, lock.base.config_digest[:19])
    rewrite_record(rebased.out, **{**record, "target_config": "sha256:" + "f" * 64})
    with pytest.raises(RebaseError) as caught:
        accept(rebased, rebased.out)
    assert says(caught.value.message, "sha256:" + "f" * 12) and says(caught.value.message, now[:19])


def test_a_record_that_is_a_list_lacks_every_key(project, tmp_path):
    (tmp_path / "rebase.json").write_text('["manifest", "target"]')
    with pytest.raises(RebaseError) as caught:
        commands.cmd_rebase(Namespace(manifest=project.root / "manifest.yaml", host=None, to=None, out=None, accept=tmp_path, json=True))
    assert says(caught.value.message, "'manifest'") and says(caught.value.message, "'target'")


MARKERS = "<<<<<<< a\n=======\n>>>>>>> b\n<<<<<<< a\n=======\n>>>>>>> b\n<<<<<<< a\n"


def test_a_refusal_for_markers_names_the_first_five_lines_only(rebased):
    (rebased.out / "resolve" / "0076" / WORKER).unlink()
    (rebased.out / "resolve" / "0077" / TENSOR).write_text(MARKERS)
    with pytest.raises(RebaseError) as caught:
        accept(rebased, rebased.out)
    assert says(caught.value.message, "(lines 1, 2, 3, 4, 5)")
    (rebased.out / "resolve" / "0077" / TENSOR).write_text("import os\n")
    clean = rebased.out / rebased.manifest.chain[0].file
    clean.write_text(MARKERS)
    with pytest.raises(RebaseError) as caught:
        accept(rebased, rebased.out)
    assert says(caught.value.message, "(lines 1, 2, 3, 4, 5)")


def list_in_record(out: Path, path: str) -> str:
    """rebase.json of the candidate `out` lists one more file of patch 0076 (its resolve/0076/ copy); the path."""
    record = json.loads((out / "rebase.json").read_text())
    record["paths"]["0076"] = [*record["paths"]["0076"], path]
    rewrite_record(out, **record)
    return path


def test_a_deleted_resolve_file_drops_its_file_and_a_new_one_is_created_by_the_patch(rebased):
    resolve(rebased.out)
    extra = list_in_record(rebased.out, "vllm/v1/worker/extra.py")
    (rebased.out / "resolve" / "0076" / extra).write_text("EXTRA = 1\n")
    (rebased.out / "resolve" / "0076" / "vllm/v1/worker/workspace.py").unlink()
    (data, _), _ = accept(rebased, rebased.out)
    patch = next(p for p in rebased.manifest.chain if p.id == "0076").path.read_text()
    assert f"b/{extra}" in patch and "+EXTRA = 1" in patch
    assert "workspace.py" not in patch.split("diff --git", 1)[1]


def test_a_rebase_onto_the_same_files_needs_nobody_and_accepting_it_replaces_nothing(project, capsys):
    base, _ = old_chain(project.manifest, project.lock)
    engine = engine_holding(base, project.lock.source_root)
    project.monkeypatch.setattr(commands, "Engine", lambda host: engine)
    data, text = rebase_to(project)
    assert data["needs_person"] == [] and data["manifest"] == "manifest.yaml"
    assert "needs a person: none\n" in text
    project.monkeypatch.setattr(pinning, "create_lock", lambda engine, manifest, rebase: SimpleNamespace(
        base=SimpleNamespace(config_digest="sha256:" + "c" * 64), derived=SimpleNamespace(image_id="sha256:" + "d" * 64)))
    result, text = commands.cmd_rebase(Namespace(manifest=project.root / "manifest.yaml", host=None, to=None, out=None,
                                                 accept=Path(data["candidate"]), json=False))
    assert result["replaced"] == [] and "replaced patches: none;" in capsys.readouterr().out
    assert says(text, "sha256:" + "c" * 12) and says(text, "sha256:" + "d" * 12)


def test_a_resolve_file_that_is_not_utf8_is_read_for_markers_and_kept_when_unchanged(rebased):
    resolve(rebased.out)
    latin = list_in_record(rebased.out, "vllm/v1/worker/latin.py")
    for where in (rebased.out / "resolve" / "0076" / ".before" / latin, rebased.out / "resolve" / "0076" / latin):
        where.write_bytes(b"name = 'caf\xe9'\n")
    (data, _), _ = accept(rebased, rebased.out)
    assert data["replaced"] == ["0076", "0077"]
    assert "latin.py" not in next(p for p in rebased.manifest.chain if p.id == "0076").path.read_text()


def test_a_candidate_patch_that_is_not_a_diff_is_named_by_its_id(rebased):
    resolve(rebased.out)
    (rebased.out / rebased.manifest.chain[0].file).write_text("not a diff at all\n")
    with pytest.raises(PatchError) as caught:
        accept(rebased, rebased.out)
    assert says(caught.value.message, rebased.manifest.chain[0].id)


def test_a_chain_patch_that_is_no_longer_a_diff_is_named_by_its_id(rebased):
    resolve(rebased.out)
    rebased.manifest.chain[0].path.write_text("not a diff at all\n")
    with pytest.raises(PatchError) as caught:
        accept(rebased, rebased.out)
    assert says(caught.value.message, rebased.manifest.chain[0].id)


def test_the_preview_is_flushed_before_locking_starts(rebased, monkeypatch):
    resolve(rebased.out)
    written = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(written, encoding="utf-8"))
    seen = []
    rebased.monkeypatch.setattr(pinning, "create_lock", lambda engine, manifest, rebase: seen.append(written.getvalue()) or SimpleNamespace(
        base=SimpleNamespace(config_digest="sha256:" + "c" * 64), derived=SimpleNamespace(image_id="sha256:" + "d" * 64)))
    commands.cmd_rebase(Namespace(manifest=rebased.root / "manifest.yaml", host=None, to=None, out=None, accept=rebased.out, json=False))
    assert b"replaced patches: 0076, 0077;" in seen[0]


def test_a_failure_after_the_candidate_was_renamed_is_the_error_raised(project, monkeypatch):
    def rename_then_fail(source, target):
        shutil.move(source, target)
        raise OSError(errno.EIO, "fsync of the parent failed")
    monkeypatch.setattr(commands, "rename_durably", rename_then_fail)
    with pytest.raises(OSError) as caught:
        rebase_to(project)
    assert caught.value.errno == errno.EIO


def test_declared_switches_the_new_files_no_longer_read_reach_the_report_and_its_record(project, tmp_path):
    # no stand-in base drops a read the chain keeps, so the finder's answer is given; the report must carry it whole
    project.monkeypatch.setattr(commands, "switch_changes", lambda old, new, declared: (("VLLM_ADDED",), ("VLLM_DSV41_KV_PAIR",)))
    data, text = rebase_to(project, out=tmp_path / "candidate")
    assert data["unread_switches"] == ["VLLM_DSV41_KV_PAIR"] and data["new_switches"] == ["VLLM_ADDED"]
    assert json.loads((tmp_path / "candidate" / "report.json").read_text())["unread_switches"] == ["VLLM_DSV41_KV_PAIR"]
    assert "`VLLM_DSV41_KV_PAIR`" in (tmp_path / "candidate" / "report.md").read_text()
