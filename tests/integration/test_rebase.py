"""`rebase --to` on a real engine: the locked stand-in chain moved onto a new local base that upstream changed in three
ways (lines inserted above a patch's hunks, a context line edited next to a hunk, a line a hunk replaces edited), the
report asserted hunk by hunk, the candidate folder checked, and nothing else changed; the bad inputs refused."""

from __future__ import annotations

import hashlib
import re
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvbake.bake.adapters.extract import Extractor
from kvbake.bake.core.diffs import normalized_patch
from kvbake.cli import main
from kvbake.engines.adapters.client import Engine

from conftest import run

pytestmark = pytest.mark.docker
STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
BASE = "kvbake-standin/vllm-base:0.33.0"
MOVED = "kvbake-test/standin-moved:1"
SOURCE_ROOT = "/usr/local/lib/python3.11/dist-packages"
UTILS, WORKER = "vllm/v1/core/kv_cache_utils.py", "vllm/v1/worker/gpu_worker.py"
OLD_IMPORT = "from vllm.v1.worker.workspace import init_workspace_manager\n"
NEW_IMPORT = "from vllm.v1.worker.workspace import init_workspace_manager, workspace_stats\n"
OLD_CONTEXT = "            self.model_runner._init_kv_zero_meta()\n"
NEW_CONTEXT = "            self.model_runner._init_kv_zero_meta()  # zeroed once per start-up\n"


UPSTREAM_KNOB = b'# upstream: a new knob\nimport os\n_KNOB = os.environ.get("VLLM_KV_UPSTREAM_KNOB", "")\n\n'  # four lines


def upstream_edits(files: dict[str, bytes]) -> dict[str, bytes]:
    """What "upstream" changed in the new base: four lines above kv_cache_utils' hunks, and in gpu_worker the import
    line 0076 replaces and a context line two lines above 0076's second hunk's insertion."""
    worker = files[WORKER].decode()
    assert worker.count(OLD_IMPORT) == 1 and worker.count(OLD_CONTEXT) == 1
    return {UTILS: UPSTREAM_KNOB + files[UTILS],
            WORKER: worker.replace(OLD_IMPORT, NEW_IMPORT).replace(OLD_CONTEXT, NEW_CONTEXT).encode()}


@pytest.fixture(scope="module")
def moved_base(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The new base: the stand-in base with upstream's edits copied over (no RUN step: the engine has no network)."""
    context = tmp_path_factory.mktemp("moved-base")
    with engine.created_container(BASE) as container:
        extractor = Extractor(engine, container, SOURCE_ROOT)
        originals = {path: extractor.file(path).data for path in (UTILS, WORKER)}
    for path, data in upstream_edits(originals).items():
        (context / "tree" / path).parent.mkdir(parents=True, exist_ok=True)
        (context / "tree" / path).write_bytes(data)
    (context / "Dockerfile").write_text(f"FROM {BASE}\nCOPY tree/ {SOURCE_ROOT}/\n")
    engine.legacy_build(context, context / "Dockerfile", MOVED)
    yield MOVED
    engine.remove_image(MOVED)


@pytest.fixture(scope="module")
def locked_standin(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rebase-template") / "standin"
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake"))
    assert main(["lock", "--manifest", str(root / "manifest.yaml"), "--rebase-base"]) == 0  # this machine's own base build
    return root


@pytest.fixture()
def project(locked_standin: Path, tmp_path: Path) -> Path:
    root = tmp_path / "standin"
    shutil.copytree(locked_standin, root)
    return root


def tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_report_says_hunk_by_hunk_how_the_chain_moves_and_the_candidate_is_written(capsys, project, moved_base):
    before = tree_hashes(project)
    code, out, err = run(capsys, "rebase", "--to", moved_base, "--manifest", str(project / "manifest.yaml"), "--json")
    assert code == 0, err
    report = json.loads(out)
    candidate = Path(report["candidate"])
    assert candidate.parent == project and candidate.name.startswith("rebase-")
    assert {k: v for k, v in tree_hashes(project).items() if not k.startswith(candidate.name + "/")} == before, "nothing else changes"
    assert sorted(p.name for p in project.iterdir() if p.name.startswith(".kvbake-rebase")) == [], "no scratch folder is left"

    states = {f["path"]: f["state"] for f in report["files"]}
    assert states[UTILS] == states[WORKER] == "changed"
    assert {s for p, s in states.items() if p not in (UTILS, WORKER)} <= {"unchanged", "absent"}
    assert states["vllm/models/deepseek_v41/kv_pack.py"] == "absent", "a file the chain creates is still free to create"

    hunks = {(p["id"], h["path"], h["number"]): h for p in report["patches"] for h in p["hunks"]}
    utils_hunks = [h for (pid, path, _), h in hunks.items() if path == UTILS]
    assert utils_hunks and all(h["status"] == "offset" and h["offset"] == 4 for h in utils_hunks), utils_hunks
    conflict = hunks[("0076", WORKER, 1)]
    assert conflict["status"] == "conflict" and conflict["reason"] == "both sides change these lines"
    assert f"-{OLD_IMPORT}" in conflict["upstream"]["diff"] and f"+{NEW_IMPORT}" in conflict["upstream"]["diff"]
    old_start = int(conflict["header"].split()[1].lstrip("-").split(",")[0])
    assert conflict["upstream"]["conflicting_lines"] == [old_start + 3], "the import line the hunk replaces, named by its old number"
    merged = hunks[("0076", WORKER, 2)]
    assert merged["status"] == "merged" and f"+{NEW_CONTEXT}" in merged["upstream"]["diff"]
    others = {key: h["status"] for key, h in hunks.items() if key[1] not in (UTILS, WORKER)}
    assert set(others.values()) == {"clean"}, others
    assert report["counts"] == {"clean": len(others), "offset": len(utils_hunks), "merged": 1, "conflict": 1}
    assert report["needs_person"] == ["0076"]
    assert report["new_switches"] == ["VLLM_KV_UPSTREAM_KNOB"] and report["unread_switches"] == []
    assert {p["id"]: p["status"] for p in report["patches"]} == {
        "0051": "clean", "0053": "offset", "0057": "clean", "0059": "clean", "0060": "clean", "0076": "conflict", "0077": "clean"}

    for patch in report["patches"]:
        original = (project / patch["file"]).read_text()
        refreshed = (candidate / patch["file"]).read_text()
        assert refreshed.startswith(original[:original.index("diff --git ")]), "the header, message and id are kept"
        if patch["status"] == "clean":
            assert normalized_patch(patch["id"], refreshed) == normalized_patch(patch["id"], original)
    refreshed_0053 = (candidate / "patches/0053-standin-packed-allocator-grouping.patch").read_text()
    assert "<<<<<<< " not in refreshed_0053
    refreshed_0076 = (candidate / "patches/0076-standin-prompt-scratch-lifetime.patch").read_text()
    assert "+<<<<<<< new base" in refreshed_0076 and f"+{NEW_CONTEXT}" not in refreshed_0076
    markdown = (candidate / "report.md").read_text()
    assert "## 0076: conflict" in markdown and "1 merged, 1 conflicted" in markdown
    assert json.loads((candidate / "report.json").read_text())["counts"] == report["counts"]
    page = ET.fromstring((candidate / "report.html").read_text())
    side = [t for t in page.iter("{http://www.w3.org/1999/xhtml}table") if t.get("class") == "side"]
    assert len(side) == len(report["patches"]) and f"+{NEW_CONTEXT}" in "".join(page.itertext())


@pytest.mark.parametrize("case", ["absent", "same", "unlocked", "out-exists", "no-tree", "other-platform"])
def test_bad_input_is_one_line_with_its_exit_code_and_nothing_is_written(capsys, project, moved_base, tiny_base, case):
    target = {"absent": "kvbake-test/no-such-base:1", "same": BASE, "no-tree": tiny_base,
              "other-platform": BASE + "-arm64"}.get(case, moved_base)
    if case == "unlocked":
        (project / "manifest.lock.json").unlink()
    if case == "out-exists":
        (project / "taken").mkdir()
    before = tree_hashes(project) | {"dirs": sorted(p.name for p in project.iterdir())}
    extra = ["--out", str(project / "taken")] if case == "out-exists" else []
    code, out, err = run(capsys, "rebase", "--to", target, "--manifest", str(project / "manifest.yaml"), *extra)
    assert code == {"absent": 6, "same": 6, "unlocked": 4, "out-exists": 2, "no-tree": 6, "other-platform": 6}[case], err
    if case == "other-platform":
        assert f"{BASE}-arm64 is linux/arm64, the locked base is linux/amd64" in err, err
    if case == "no-tree":
        assert "holds none of the chain's files under /usr/local/lib/python3.11/dist-packages" in err, err
    assert len(err.strip().splitlines()) == 1 and "fix:" in err, err
    assert tree_hashes(project) | {"dirs": sorted(p.name for p in project.iterdir())} == before


def test_build_over_a_moved_base_tag_names_both_images_and_points_to_rebase(capsys, engine, project, moved_base):
    """The project pins its own tag of the stand-in base; upstream then re-pushes that tag with other content."""
    own_tag = "kvbake-test/standin-base-tag:1"
    engine.tag(engine.image_id_of(BASE), own_tag)
    try:
        manifest = project / "manifest.yaml"
        manifest.write_text(manifest.read_text().replace(f"image: {BASE}", f"image: {own_tag}"))
        assert run(capsys, "lock", "--manifest", str(manifest), "--rebase-base")[0] == 0
        pinned = json.loads((project / "manifest.lock.json").read_text())["base"]["config_digest"]
        engine.tag(engine.image_id_of(moved_base), own_tag)
        now = engine.config_digest_of(engine.inspect_image(own_tag), own_tag)
        before = tree_hashes(project)
        code, _, err = run(capsys, "build", "--manifest", str(manifest))
        assert code == 6 and len(err.strip().splitlines()) == 1, err
        assert f"{own_tag} now names another image (config {now}), not the one the lock pins (config {pinned})" in err
        assert f"rebase --to {own_tag}" in err
        assert tree_hashes(project) == before, "nothing is built or written"
    finally:
        engine.untag(own_tag)


RESOLVED_IMPORT = ("from vllm.v1.worker.workspace import (\n    init_workspace_manager,\n    prompt_scratch_alias,\n"
                   "    prompt_scratch_transient,\n    workspace_stats,\n)\n")


def rebased(capsys, project: Path, target: str) -> Path:
    code, out, err = run(capsys, "rebase", "--to", target, "--manifest", str(project / "manifest.yaml"), "--json")
    assert code == 0, err
    return Path(json.loads(out)["candidate"])


def chain_state(project: Path) -> dict[str, str]:
    """The files accept may change: the manifest, the patches, the lock and overlay/."""
    return {k: v for k, v in tree_hashes(project).items() if k.startswith(("manifest", "patches/", "overlay/"))}


def builds_and_verifies_deep(capsys, engine, project: Path) -> None:
    """The accepted chain builds on its new base and `verify --deep` proves the image; the built tag is removed after."""
    code, out, err = run(capsys, "build", "--manifest", str(project / "manifest.yaml"), "--json")
    assert code == 0, err
    image = json.loads(out)["image"]
    try:
        code, _, err = run(capsys, "verify", "--deep", "--manifest", str(project / "manifest.yaml"))
        assert code == 0, err
    finally:
        engine.untag(image)


def test_accept_refuses_a_marker_then_takes_the_resolved_chain_which_builds_and_verifies_deep(capsys, engine, project, moved_base):
    candidate = rebased(capsys, project, moved_base)
    conflicted = candidate / "resolve" / "0076" / WORKER
    assert "<<<<<<< new base" in conflicted.read_text()
    assert (candidate / "resolve" / "0076" / ".before" / WORKER).read_text().count(NEW_IMPORT) == 1
    before = chain_state(project)
    code, _, err = run(capsys, "rebase", "--accept", str(candidate), "--manifest", str(project / "manifest.yaml"))
    assert code == 18 and f"{conflicted} still holds conflict markers" in err, err
    assert chain_state(project) == before

    conflicted.write_text(re.sub(r"<<<<<<< new base\n.*?>>>>>>> old patched\n", RESOLVED_IMPORT, conflicted.read_text(), flags=re.S))
    code, out, err = run(capsys, "rebase", "--accept", str(candidate), "--manifest", str(project / "manifest.yaml"))
    assert code == 0, err
    assert f"-  image: {BASE}\n+  image: {moved_base}\n" in out and "replaced patches: 0053, 0076;" in out, out
    after = chain_state(project)
    changed = {k for k in before if after.get(k) != before[k]}
    assert {k for k in changed if k.startswith("patches/")} == {"patches/0053-standin-packed-allocator-grouping.patch",
                                                                 "patches/0076-standin-prompt-scratch-lifetime.patch"}
    lock = json.loads((project / "manifest.lock.json").read_text())
    assert lock["base"]["reference"] == moved_base
    assert lock["base"]["config_digest"] == engine.config_digest_of(engine.inspect_image(moved_base), moved_base)
    assert RESOLVED_IMPORT in (project / "overlay" / WORKER).read_text() and NEW_CONTEXT in (project / "overlay" / WORKER).read_text()
    builds_and_verifies_deep(capsys, engine, project)


@pytest.mark.parametrize("case", ["not-a-candidate", "another-manifest", "stale-target"])
def test_accept_refuses_a_candidate_that_does_not_fit_and_changes_nothing(capsys, engine, project, moved_base, tmp_path, case):
    own_tag = "kvbake-test/standin-target:1"
    engine.tag(engine.image_id_of(moved_base), own_tag)
    try:
        candidate = rebased(capsys, project, own_tag)
        manifest = project / "manifest.yaml"
        if case == "not-a-candidate":
            (candidate / "rebase.json").unlink()
        if case == "another-manifest":
            shutil.copytree(project, tmp_path / "other", ignore=shutil.ignore_patterns("rebase-*"))
            manifest = tmp_path / "other" / "manifest.yaml"
        if case == "stale-target":
            engine.tag(engine.image_id_of(BASE), own_tag)  # the target tag moved after the report
        before = chain_state(manifest.parent)
        code, _, err = run(capsys, "rebase", "--accept", str(candidate), "--manifest", str(manifest))
        assert code == 18 and len(err.strip().splitlines()) == 1, err
        assert {"not-a-candidate": "holds no readable rebase.json", "another-manifest": "was made for",
                "stale-target": f"{own_tag} now names config"}[case] in err, err
        assert chain_state(manifest.parent) == before
    finally:
        engine.untag(own_tag)


NEXT_RELEASE = "kvbake-standin/vllm-base:0.34.0"  # python scripts/standin_base.py --vllm-version 0.34.0
# The stand-in chain written for vLLM 0.33.0, moved onto 0.34.0's real sources: (patch, file, hunk) -> status and offset.
EXPECTED_HUNKS = {
    ("0051", "vllm/models/deepseek_v41/attention.py", 1): ("offset", 8),
    ("0051", "vllm/models/deepseek_v41/attention.py", 2): ("offset", 50),
    ("0051", "vllm/v1/kv_cache_interface.py", 1): ("clean", 0),
    **{("0051", "vllm/v1/kv_cache_interface.py", n): ("offset", 12) for n in (2, 3, 4, 5)},
    ("0051", "vllm/v1/kv_cache_interface.py", 6): ("offset", 13),
    ("0053", UTILS, 1): ("offset", 2),
    ("0053", UTILS, 2): ("offset", 21),
    ("0053", UTILS, 3): ("offset", 21),
    ("0053", "vllm/v1/kv_cache_interface.py", 1): ("offset", 12),
    ("0057", "vllm/envs.py", 1): ("conflict", 0),
    ("0057", "vllm/envs.py", 2): ("offset", 132),
    ("0057", "vllm/models/deepseek_v41/kv_pack.py", 1): ("clean", 0),
    ("0059", "vllm/models/deepseek_v41/kv_pack.py", 1): ("clean", 0),
    ("0059", "vllm/v1/worker/workspace.py", 1): ("clean", 0),
    ("0060", "vllm/models/deepseek_v41/attention.py", 1): ("clean", 0),
    ("0060", "vllm/models/deepseek_v41/attention.py", 2): ("merged", 0),
    ("0060", "vllm/models/deepseek_v41/attention.py", 3): ("offset", 49),
    ("0060", "vllm/models/deepseek_v41/kv_pack.py", 1): ("clean", 0),
    ("0060", "vllm/models/deepseek_v41/nvidia/model.py", 1): ("conflict", 0),
    ("0076", WORKER, 1): ("offset", 16),
    ("0076", WORKER, 2): ("offset", 46),
    ("0076", "vllm/v1/worker/workspace.py", 1): ("clean", 0),
    ("0076", "vllm/v1/worker/workspace.py", 2): ("conflict", 0),
    ("0077", "exllamav3/util/tensor.py", 1): ("clean", 0),  # both bases hold exllamav3 1.6.5: the second package stays
    ("0077", "exllamav3/util/tensor.py", 2): ("clean", 0),
}
MARKED = re.compile(r"<<<<<<< new base\n(?P<new>.*?)=======\n(?P<old>.*?)>>>>>>> old patched\n", re.S)
# 0.34.0 computes whether the MTP hidden-state buffer is needed in a helper; 0060's switch then turns it off.
MTP_RESOLVED = ("        needs_mtp_hidden_states = needs_mtp_hidden_buffer(spec_config)\n"
                "        # kvbake stand-in (0060): VLLM_DSV41_DROP_MTP_BUFFER=1 skips this\n"
                "        # buffer on a rank whose drafter reads hidden states elsewhere.\n"
                "        if envs.VLLM_DSV41_DROP_MTP_BUFFER and needs_mtp_hidden_states:\n"
                '            logger.info_once("DeepSeek V4.1: MTP hidden-state buffer dropped")\n'
                "            needs_mtp_hidden_states = False\n"
                "        if get_pp_group().is_last_rank and needs_mtp_hidden_states:\n")


def resolve(path: Path, keep_both: bool) -> None:
    """A person's resolution: upstream's lines and the patch's both (each side added its own), or 0060's rewrite."""
    text = path.read_text()
    assert MARKED.search(text), path
    path.write_text(MARKED.sub(lambda m: m["new"] + m["old"] if keep_both else MTP_RESOLVED, text))


def test_the_chain_moves_between_two_real_vllm_releases_and_the_resolved_chain_builds_and_verifies(capsys, engine, project):
    assert engine.inspect_image(NEXT_RELEASE) is not None, "build it: python scripts/standin_base.py --vllm-version 0.34.0"
    candidate = rebased(capsys, project, NEXT_RELEASE)
    report = json.loads((candidate / "report.json").read_text())
    found = {(p["id"], h["path"], h["number"]): (h["status"], h.get("offset", 0)) for p in report["patches"] for h in p["hunks"]}
    assert found == EXPECTED_HUNKS
    assert report["counts"] == {"clean": 9, "offset": 15, "merged": 1, "conflict": 3} and report["needs_person"] == ["0057", "0060", "0076"]
    assert {f["path"]: f["state"] for f in report["files"]} == {
        **{path: "changed" for (_, path, _) in EXPECTED_HUNKS if path.startswith("vllm/")},
        "vllm/models/deepseek_v41/kv_pack.py": "absent", "exllamav3/util/tensor.py": "unchanged"}
    mtp = next(h for p in report["patches"] for h in p["hunks"] if (p["id"], h["number"]) == ("0060", 1) and h["path"].endswith("model.py"))
    assert "+        if get_pp_group().is_last_rank and needs_mtp_hidden_buffer(spec_config):" in mtp["upstream"]["diff"]

    resolve(candidate / "resolve" / "0057" / "vllm/envs.py", keep_both=True)
    resolve(candidate / "resolve" / "0060" / "vllm/models/deepseek_v41/nvidia/model.py", keep_both=False)
    resolve(candidate / "resolve" / "0076" / "vllm/v1/worker/workspace.py", keep_both=True)
    code, out, err = run(capsys, "rebase", "--accept", str(candidate), "--manifest", str(project / "manifest.yaml"))
    assert code == 0, err
    assert "replaced patches: 0051, 0053, 0057, 0060, 0076;" in out, out
    assert json.loads((project / "manifest.lock.json").read_text())["base"]["reference"] == NEXT_RELEASE
    builds_and_verifies_deep(capsys, engine, project)
