"""The bake on a tiny file-only base: reproducible IDs, metadata kept, whiteouts, and every bad input refused cleanly."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.bake.adapters.extract import Extractor
from kvbake.manifest import load_manifest

from conftest import leftover_containers, run, tags_of
from tiny import MOD_V1, TINY_BASE, diff, import_base

pytestmark = [pytest.mark.docker, pytest.mark.every_engine]  # bake and push are proven on Docker 20.10 too
REPO = "127.0.0.1:5000/tiny"


def build_json(capsys, manifest: Path, *extra: str) -> dict:
    code, out, err = run(capsys, "build", "--manifest", str(manifest), "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def assert_clean_failure(capsys, engine: Engine, manifest: Path, code: int, fragment: str, *argv: str) -> str:
    """The command fails with `code`, a one-line message holding `fragment`, no new tag, no container, no temp file."""
    before = tags_of(engine, REPO)
    got, _, err = run(capsys, *(argv or ("build",)), "--manifest", str(manifest))
    assert got == code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "fix:" in lines[0], err
    assert tags_of(engine, REPO) == before
    assert leftover_containers(engine) == []
    assert list(Path(tempfile.gettempdir()).iterdir()) == []
    return lines[0]


def test_build_is_reproducible_and_matches_the_lock(capsys, engine, tiny):
    first = build_json(capsys, tiny)
    second = build_json(capsys, tiny)
    lock = json.loads(tiny.with_name("manifest.lock.json").read_text())
    assert first["config_digest"] == second["config_digest"] == lock["derived"]["image_id"]
    assert first["image_id"] == second["image_id"] == engine.inspect_image(first["image"])["Id"]
    profile = engine.profile()
    assert first["engine"]["name"] == profile.name
    assert (first["image_id"] == first["config_digest"]) == (profile.store == "classic")
    if profile.store == "containerd":  # the build remembers the manifest it wrote: no docker save to resolve the ID
        from kvbake.engines.adapters import manifestcache

        assert manifestcache.get(first["image_id"]) is not None
    assert first["image"].startswith(REPO + ":1-kvpack-")
    inspect = engine.inspect_image(first["image"])
    assert inspect["RootFS"]["Layers"][-1] == lock["derived"]["layer_diff_id"]
    assert not {"TINY_SWITCH", "TINY_OTHER", "TINY_BAD"} & {e.split("=")[0] for e in inspect["Config"]["Env"]}
    assert inspect["Config"]["Labels"]["org.kvbake.switches"] == "TINY_OTHER,TINY_SWITCH"


def test_plan_changes_nothing_and_names_every_file(capsys, engine, tiny):
    before = tags_of(engine, REPO)
    code, out, _ = run(capsys, "plan", "--manifest", str(tiny), "--json")
    assert code == 0
    plan = json.loads(out)
    assert [f["path"] for f in plan["files"]] == ["pkg/mod.py", "pkg/new.py"]
    assert plan["files"][1]["before"] is None
    assert plan["whiteouts"] == ["usr/lib/py/pkg/__pycache__/mod.cpython-311.opt-1.pyc", "usr/lib/py/pkg/__pycache__/mod.cpython-311.pyc"]
    assert tags_of(engine, REPO) == before


def test_layer_keeps_base_metadata_and_removes_stale_bytecode(capsys, engine, tiny):
    image = build_json(capsys, tiny)["image"]
    with engine.created_container(image) as container:
        extractor = Extractor(engine, container, "/usr/lib/py")
        mod = extractor.file("pkg/mod.py")
        assert mod is not None and mod.mode == 0o640 and (mod.uid, mod.gid) == (0, 0)
        assert extractor.file("pkg/__pycache__/mod.cpython-311.pyc") is None
        assert extractor.file("pkg/__pycache__/mod.cpython-311.opt-1.pyc") is None
        assert extractor.file("pkg/__pycache__/other.cpython-311.pyc").data == b"keep"
        with tempfile.TemporaryDirectory() as tmp:
            assert engine.copy_out(container, "/usr/lib/py/pkg", Path(tmp, "pkg"))
            assert Path(tmp, "pkg").stat().st_mode & 0o777 == 0o750


def test_verify_deep_on_a_file_only_image(capsys, engine, tiny):
    build_json(capsys, tiny)
    code, out, err = run(capsys, "verify", "--deep", "--manifest", str(tiny))
    assert code == 0, err
    assert "2 files read back" in out and "no python3" in out


def test_unlocked_manifest(capsys, engine, tiny):
    tiny.with_name("manifest.lock.json").unlink()
    line = assert_clean_failure(capsys, engine, tiny, 4, "is not locked")
    assert "python build.py lock" in line


def test_lock_drifts_from_manifest(capsys, engine, tiny):
    tiny.write_text(tiny.read_text().replace('TINY_SWITCH: {values: ["3"]}', 'TINY_SWITCH: {values: ["3", "4"]}'))
    assert_clean_failure(capsys, engine, tiny, 4, "drifts")


def test_a_comment_does_not_drift_the_lock(capsys, engine, tiny):
    tiny.write_text(tiny.read_text() + "# a reviewed change\n")
    assert run(capsys, "build", "--manifest", str(tiny))[0] == 0


def test_malformed_manifest_exit_code(capsys, engine, tiny):
    tiny.write_text("format: [1\n")
    assert_clean_failure(capsys, engine, tiny, 3, "malformed YAML")


def test_missing_patch_file(capsys, engine, tiny):
    tiny.with_name("patches").joinpath("0002-new-module.patch").unlink()
    assert_clean_failure(capsys, engine, tiny, 5, "is missing")


def test_patch_hash_differs_from_lock(capsys, engine, tiny):
    patch = tiny.with_name("patches") / "0002-new-module.patch"
    patch.write_text(patch.read_text() + "\n")
    assert_clean_failure(capsys, engine, tiny, 5, "differs from the lock")


def _relock_with(capsys, engine, tiny: Path, patch_text: str, code: int, fragment: str) -> None:
    assert_clean_failure_after_relock(capsys, engine, tiny, patch_text, code, fragment)


def assert_clean_failure_after_relock(capsys, engine, tiny: Path, patch_text: str, code: int, fragment: str) -> str:
    """`lock` with a new feature patch fails cleanly and leaves the lock, overlay/ and the project folder as they were."""
    (tiny.with_name("patches") / "0002-new-module.patch").write_text(patch_text)
    lock_before = tiny.with_name("manifest.lock.json").read_bytes()
    overlay_before = sorted(p.name for p in tiny.with_name("overlay").rglob("*"))
    folder_before = sorted(p.name for p in tiny.parent.iterdir())
    line = assert_clean_failure(capsys, engine, tiny, code, fragment, "lock")
    assert tiny.with_name("manifest.lock.json").read_bytes() == lock_before
    assert sorted(p.name for p in tiny.with_name("overlay").rglob("*")) == overlay_before
    assert sorted(p.name for p in tiny.parent.iterdir()) == folder_before
    return line


def test_patch_that_does_not_apply(capsys, engine, tiny):
    from tiny import MOD_V2, MOD_V3

    wrong = diff("pkg/mod.py", MOD_V2.replace("def g", "def h"), MOD_V3.replace("def g", "def h"))
    _relock_with(capsys, engine, tiny, wrong, 5, "does not apply")


def test_patch_with_an_offset(capsys, engine, tiny):
    from tiny import MOD_V2, MOD_V3

    shifted = diff("pkg/mod.py", "# one\n# two\n" + MOD_V2, "# one\n# two\n" + MOD_V3)
    _relock_with(capsys, engine, tiny, shifted, 5, "offset")


def test_patch_already_applied(capsys, engine, tiny):
    first = (tiny.with_name("patches") / "0001-switch.patch").read_text()
    _relock_with(capsys, engine, tiny, first, 5, "already applied")


def test_reversed_patch(capsys, engine, tiny):
    from tiny import MOD_V2

    manifest = tiny.read_text().replace('role: dependency, needed_by: ["0002"]', "role: feature")
    tiny.write_text(manifest)
    (tiny.with_name("patches") / "0001-switch.patch").write_text(diff("pkg/mod.py", MOD_V2, MOD_V1))
    assert_clean_failure(capsys, engine, tiny, 5, "reversed", "lock")


@pytest.mark.parametrize("existing", ["pkg/other.py", "pkg/__pycache__"])
def test_patch_creating_a_path_the_base_already_has(capsys, engine, tiny, existing):
    from tiny import MOD_V2, MOD_V3, NEW

    creating = diff("pkg/mod.py", MOD_V2, MOD_V3) + diff("pkg/new.py", None, NEW) + diff(existing, None, "y = 2\n")
    line = assert_clean_failure_after_relock(capsys, engine, tiny, creating, 5,
                                             f"patch 0002 creates {existing} as a new file, but kvbake-test/tiny:1 already has {existing}")
    assert "git diff against the base" in line


def test_patch_outside_the_source_root(capsys, engine, tiny):
    escaping = diff("pkg/new.py", None, "x = 1\n").replace("b/pkg/new.py", "b/../etc/new.py")
    _relock_with(capsys, engine, tiny, escaping, 5, "outside the source root")


def test_patch_that_touches_nothing(capsys, engine, tiny):
    _relock_with(capsys, engine, tiny, "just words, no diff\n", 5, "touches no file")


def test_base_image_absent_is_never_pulled(capsys, engine, tiny):
    text = tiny.read_text().replace("kvbake-test/tiny:1", "kvbake-test/absent:1")
    tiny.write_text(text)
    assert_clean_failure(capsys, engine, tiny, 6, "never pulls", "lock")
    assert engine.inspect_image("kvbake-test/absent:1") is None


def test_base_image_differs_from_lock(capsys, engine, tiny):
    other = "kvbake-test/tiny-other:1"
    import_base(engine, other, MOD_V1 + "# changed\n")
    tiny.write_text(tiny.read_text().replace("kvbake-test/tiny:1", other))
    lock = json.loads(tiny.with_name("manifest.lock.json").read_text())
    lock["manifest_sha256"] = load_manifest(tiny).image_sha256  # the lock now pins the edited image sections
    tiny.with_name("manifest.lock.json").write_text(json.dumps(lock))
    assert_clean_failure(capsys, engine, tiny, 6, "differs from the lock")


def test_base_file_hash_differs(capsys, engine, tiny):
    path = tiny.with_name("manifest.lock.json")
    lock = json.loads(path.read_text())
    lock["files"][0]["base_sha256"] = "0" * 64
    path.write_text(json.dumps(lock))
    assert_clean_failure(capsys, engine, tiny, 7, "base file pkg/mod.py")


def test_overlay_drift(capsys, engine, tiny):
    target = tiny.with_name("overlay") / "pkg" / "new.py"
    target.write_text(target.read_text() + "# local edit\n")
    assert_clean_failure(capsys, engine, tiny, 7, "shipped overlay/ differs")


def test_engine_unreachable(capsys, engine, tiny, tmp_path):
    host = f"unix://{tmp_path}/nothing.sock"
    line = assert_clean_failure(capsys, engine, tiny, 8, "unreachable", "build", "--host", host)
    assert line.count(host) == 1, line
    assert "fix: start the Docker service of that machine" in line and "dockerd" not in line and "README" not in line, line


def test_disk_full_while_writing_the_archive(capsys, engine, tiny, tmp_path, monkeypatch):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(small)], check=True)
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(small))
        before = tags_of(engine, REPO)
        code, _, err = run(capsys, "build", "--manifest", str(tiny))
        assert code == 10 and "no space left" in err and err.count("\n") == 1, err
        assert tags_of(engine, REPO) == before
        assert list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_donor_checkout_dirty_or_elsewhere(capsys, engine, tiny, tmp_path):
    donor = tmp_path / "donor"
    shutil.copytree(tiny.with_name("patches"), donor / "patches")
    git = ["git", "-C", str(donor), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q", str(donor)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "chain"], check=True)
    assert_clean_failure(capsys, engine, tiny, 9, "the manifest pins", "lock", "--donor", str(donor))
    revision = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    tiny.write_text(tiny.read_text().replace("0123456789abcdef0123456789abcdef01234567", revision))
    (donor / "stray.txt").write_text("x")
    assert_clean_failure(capsys, engine, tiny, 9, "dirty", "lock", "--donor", str(donor))
    (donor / "stray.txt").unlink()
    for patch in tiny.with_name("patches").iterdir():
        patch.unlink()
    code, out, err = run(capsys, "lock", "--manifest", str(tiny), "--donor", str(donor))
    assert code == 0, err
    assert "imported from the donor: 0001, 0002" in out
    assert sorted(p.name for p in tiny.with_name("patches").iterdir()) == ["0001-switch.patch", "0002-new-module.patch"]



def test_a_failed_lock_with_a_donor_leaves_the_patches_as_they_were(capsys, engine, tiny, tmp_path):
    """The donor's patches are imported, then the base is absent (exit 6): patches/ keeps its old bytes, new files go."""
    patches = tiny.with_name("patches")
    donor = tmp_path / "donor"
    shutil.copytree(patches, donor / "patches")
    git = ["git", "-C", str(donor), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q", str(donor)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "chain"], check=True)
    revision = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    text = tiny.read_text().replace("0123456789abcdef0123456789abcdef01234567", revision)
    tiny.write_text(text.replace("kvbake-test/tiny:1", "kvbake-test/absent:1"))
    patches.joinpath("0001-switch.patch").write_bytes(b"an older copy, kept\n")
    patches.joinpath("0002-new-module.patch").unlink()
    before = {p.name: p.read_bytes() for p in patches.iterdir()}
    assert_clean_failure(capsys, engine, tiny, 6, "is not present on", "lock", "--donor", str(donor))
    assert {p.name: p.read_bytes() for p in patches.iterdir()} == before

@pytest.mark.parametrize("change,fragment", [
    ("LABEL org.kvbake.chain=forged", "label org.kvbake.chain"),
    ("ENV TINY_SWITCH=3", "switch TINY_SWITCH is set"),
    ("ENV TINY_BAD=1", "switch TINY_BAD is set"),
    ("COPY extra.txt /extra.txt", "exactly one new layer"),
])
def test_verify_refuses_a_tampered_image(capsys, engine, tiny, tmp_path, change, fragment):
    image = build_json(capsys, tiny)["image"]
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "extra.txt").write_text("extra")
    (context / "Dockerfile").write_text(f"FROM {image}\n{change}\n")
    tampered = f"kvbake-test/tampered:{abs(hash(change)) % 10_000}"
    engine.legacy_build(context, context / "Dockerfile", tampered)  # the classic builder, as buildx may be installed
    try:
        code, _, err = run(capsys, "verify", tampered, "--manifest", str(tiny))
        assert code == 7 and fragment in err, err
    finally:
        engine.remove_image(tampered)


@pytest.mark.parametrize("shadow", ["pkg/mod/__init__.py", "pkg/mod.cpython-311-x86_64-linux-gnu.so", "pkg/mod.so"])
def test_lock_refuses_a_base_where_something_shadows_a_patched_module(capsys, engine, tiny, shadow):
    if shadow.endswith("x86_64-linux-gnu.so") and engine.inspect_image(TINY_BASE)["Architecture"] != "amd64":
        shadow = shadow.replace("x86_64", "aarch64")
    other = f"kvbake-test/tiny-shadowed:{shadow.replace('/', '-')}"
    import_base(engine, other, MOD_V1, (shadow,))
    tiny.write_text(tiny.read_text().replace("kvbake-test/tiny:1", other))
    assert_clean_failure(capsys, engine, tiny, 6, f"pkg/mod.py is shadowed in {other} by {shadow}", "lock")
    engine.remove_image(other)
