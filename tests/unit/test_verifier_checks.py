"""`verify` over a fake engine: shallow checks, the deep read-back, the image's own python3 proof, and each failure."""

from __future__ import annotations

import ast

import pytest

from kvbake.bake.adapters import verifier
from kvbake.bake.adapters.builder import build_image, build_with_docker
from kvbake.bake.adapters.pinning import create_lock
from kvbake.bake.adapters.verifier import (BYTECODE_PROOF, VerifyReport, emulator_registered, engine_can_run, expectation_for,
                                           normalised_arch, prove_bytecode, verify_image)
from kvbake.bake.core.plan import make_plan, read_overlay
from kvbake.errors import IntegrityError
from kvbake.lock import read_lock
from tests.unit.bake_project import PYC, SOURCE, engine_with_base, project
from tests.unit.message_words import says

MODULES = [f"/{SOURCE}/pkg/helper.py", f"/{SOURCE}/pkg/mod.py"]


@pytest.fixture()
def built(tmp_path, monkeypatch):
    """A locked tiny project, the engine, the plan and the built image's reference."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    manifest = project(tmp_path)
    engine = engine_with_base()
    create_lock(engine, manifest)
    image = build_image(engine, manifest)
    lock = read_lock(manifest)
    engine.calls.clear()
    return engine, make_plan(manifest, lock, read_overlay(manifest, lock)), image.reference


def proof(runs: dict[str, bool]) -> str:
    return "some noise\n" + repr({path: {"patched_code_runs": ok, "cached_bytecode": False} for path, ok in runs.items()}) + "\n"


def refused(call) -> IntegrityError:
    with pytest.raises(IntegrityError) as caught:
        call()
    assert caught.value.exit_code == 7
    return caught.value


def test_a_shallow_verify_checks_the_image_and_reads_no_file(built):
    engine, plan, image = built
    report = verify_image(engine, plan, image, deep=False)
    assert report == VerifyReport(image, plan.image_id, False, 0, 0, False, plan.image_id, engine.profile().name)
    assert not [c for c in engine.calls if c[0] in ("create", "run_python")]


def test_an_absent_image_is_refused_with_the_fix_to_build_it(built):
    engine, plan, _ = built
    error = refused(lambda: verify_image(engine, plan, "nowhere:1", deep=False))
    assert "nowhere:1" in error.message and says(error.fix, "build it first") and says(error.fix, "pass a local image")


def test_an_image_whose_labels_differ_is_refused(built):
    engine, plan, image = built
    engine.images[plan.image_id]["Config"]["Labels"]["org.kvbake.chain"] = "0001:other"
    error = refused(lambda: verify_image(engine, plan, image, deep=False))
    assert image in error.message and "org.kvbake.chain" in error.message


def test_a_deep_verify_reads_every_file_back_and_runs_the_images_python(built):
    engine, plan, image = built
    engine.python_answer = proof({path: True for path in MODULES})
    report = verify_image(engine, plan, image, deep=True)
    assert (report.deep, report.files_checked, report.offline_proven, report.modules_proven, report.python) == (True, 2, 2, 2, True)
    assert (report.image_platform, report.interpreter_ran, report.config_digest) == ("linux/amd64", True, plan.image_id)
    (run,) = [c for c in engine.calls if c[0] == "run_python"]
    assert run[1] == image and run[2] == BYTECODE_PROOF.replace("PATHS", repr(MODULES))
    assert "modules_proven" not in report.proofs() and "interpreter proof: 2 modules" in report.proofs()
    assert "offline proof: 2 modules" in report.proofs()


def test_an_image_without_python_is_proven_offline_only(built):
    engine, plan, image = built
    report = verify_image(engine, plan, image, deep=True)
    assert (report.modules_proven, report.python, report.interpreter_ran, report.offline_proven) == (0, False, True, 2)
    assert "no python3 in the image" in report.proofs() and "interpreter proof:" not in report.proofs()


@pytest.fixture()
def binfmt(tmp_path, monkeypatch):
    """The kernel's binfmt_misc folder, as an empty folder the test fills."""
    entries = tmp_path / "binfmt"
    entries.mkdir()
    real = verifier.Path
    monkeypatch.setattr(verifier, "Path", lambda text: real(str(text).replace("/proc/sys/fs/binfmt_misc", str(entries))))
    return entries


def test_an_image_this_engine_cannot_run_skips_the_interpreter_proof(built, binfmt):
    engine, plan, image = built
    engine.facts = {"os_type": "linux", "architecture": "aarch64"}
    engine.python_answer = proof({path: True for path in MODULES})
    report = verify_image(engine, plan, image, deep=True)
    assert (report.interpreter_ran, report.modules_proven, report.python, report.offline_proven) == (False, 0, False, 2)
    assert not [c for c in engine.calls if c[0] == "run_python"]
    assert "the image is linux/amd64 and this engine cannot run it" in report.proofs()


def test_an_image_of_another_platform_runs_where_an_emulator_is_registered(built, binfmt):
    engine, plan, image = built
    (binfmt / "qemu-x86_64").write_text("enabled\n")
    engine.facts = {"os_type": "linux", "architecture": "aarch64"}
    engine.python_answer = proof({path: True for path in MODULES})
    report = verify_image(engine, plan, image, deep=True)
    assert (report.interpreter_ran, report.modules_proven, report.python) == (True, 2, True)


def test_a_module_whose_running_code_is_not_the_patched_source_is_named(built):
    engine, plan, image = built
    engine.python_answer = proof({MODULES[0]: True, MODULES[1]: False})
    error = refused(lambda: prove_bytecode(engine, image, plan.lock))
    assert MODULES[1] in error.message and MODULES[0] not in error.message and image in error.message


def test_the_proof_counts_the_modules_the_image_reported():
    class Runs:
        answer = proof({MODULES[1]: True})

        def run_python(self, image, code):
            self.code = code
            return self.answer

    engine = Runs()
    lock = type("L", (), {"source_root": "/" + SOURCE, "files": [type("F", (), {"path": p})() for p in ("pkg/mod.py", "pkg/data.json")]})()
    assert prove_bytecode(engine, "img", lock) == (1, True)
    assert ast.literal_eval(engine.code.split("for path in ")[1].split(":")[0]) == [f"/{SOURCE}/pkg/mod.py"]


def test_a_changed_chain_file_in_the_image_is_named_with_both_hashes(built):
    engine, plan, image = built
    engine.extra_files[plan.image_id] = {f"{SOURCE}/pkg/helper.py": (b"tampered\n", 0o644)}
    error = refused(lambda: verify_image(engine, plan, image, deep=True))
    assert "pkg/helper.py has sha256" in error.message and "pkg/mod.py" not in error.message.split("failed:")[1]


def test_a_chain_file_missing_from_the_image_is_named(built):
    engine, plan, image = built
    filesystem = engine.filesystem

    def without_helper(reference):
        files = filesystem(reference)
        files.pop(f"{SOURCE}/pkg/helper.py")
        return files

    engine.filesystem = without_helper
    error = refused(lambda: verify_image(engine, plan, image, deep=True))
    assert "pkg/helper.py is missing from the image" in error.message


def test_stale_bytecode_left_in_the_image_is_named(built):
    engine, plan, image = built
    engine.extra_files[plan.image_id] = {f"{SOURCE}/pkg/__pycache__/mod.cpython-311.pyc": (PYC, 0o644)}
    error = refused(lambda: verify_image(engine, plan, image, deep=True))
    assert "stale bytecode pkg/__pycache__/mod.cpython-311.pyc" in error.message and "opt-1" not in error.message.split("stale")[1][:60]


@pytest.mark.parametrize("shadow", ["pkg/mod/__init__.py", "pkg/mod.cpython-311-x86_64-linux-gnu.so"])
def test_a_shadowing_module_is_looked_for_only_in_images_of_other_builders(built, shadow):
    engine, plan, image = built
    engine.extra_files[plan.image_id] = {f"{SOURCE}/{shadow}": (b"", 0o644)}
    verify_image(engine, plan, image, deep=True)
    docker = build_with_docker(engine, plan.manifest)
    engine.extra_files[engine.tags[docker.reference]] = {f"{SOURCE}/{shadow}": (b"", 0o644)}
    error = refused(lambda: verify_image(engine, plan, docker.reference, deep=True, builder="docker"))
    assert shadow in error.message


def test_the_docker_builders_expectation_allows_two_new_layers_of_unknown_ids(built):
    _, plan, _ = built
    docker = expectation_for(plan, "docker")
    assert (docker.layer_diff_id, docker.config_digest, docker.max_new_layers) == (None, None, 2)
    assert docker.base_diff_ids == plan.lock.base.diff_ids and docker.labels == plan.image_labels()
    assert set(docker.switch_names) == {"TINY_SWITCH", "TINY_OTHER", "TINY_BAD"}
    own = expectation_for(plan, "kvbake")
    assert (own.layer_diff_id, own.config_digest, own.max_new_layers) == (plan.layer.diff_id, plan.image_id, 1)
    assert own.switch_names == docker.switch_names and own.labels == docker.labels


@pytest.mark.parametrize(("machine", "arch"), [("x86_64", "amd64"), ("aarch64", "arm64"), ("armv7l", "arm"), ("i686", "386"),
                                               ("riscv64", "riscv64")])
def test_the_kernels_machine_name_becomes_the_images_architecture(machine, arch):
    assert normalised_arch(machine) == arch


def test_the_engine_runs_images_of_its_own_platform():
    class Facts:
        def __init__(self, facts):
            self.facts = facts

        def ping(self):
            return self.facts

    assert engine_can_run(Facts({"os_type": "linux", "architecture": "x86_64"}), "linux/amd64") is True
    assert engine_can_run(Facts({"os_type": "linux", "architecture": "aarch64"}), "linux/arm64") is True
    assert engine_can_run(Facts({"os_type": "windows", "architecture": "x86_64"}), "linux/kvbake-none") is False


def test_an_emulator_counts_only_when_its_entry_is_enabled(binfmt):
    assert emulator_registered("kvbake-none") is False
    (binfmt / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu-aarch64\n")
    (binfmt / "qemu-s390x").write_text("disabled\n")
    (binfmt / "qemu-arm").write_text("enabled\n")
    (binfmt / "qemu-ppc64le").write_text("enabled\n")
    (binfmt / "qemu-riscv64").write_text("enabled\n")
    assert emulator_registered("arm64") is True and emulator_registered("s390x") is False
    assert emulator_registered("arm") is True and emulator_registered("ppc64le") is True and emulator_registered("riscv64") is True
    assert emulator_registered("amd64") is False
