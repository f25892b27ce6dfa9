"""Tests of switch coverage: the scanners on small fragments, the rules, and the stand-in chain with broken manifest copies."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from kvbake.bake.core.chain import read_patch
from kvbake.bake.core.env_reads import READS, REGISTERS, Where, registered_names, scan_added_lines, scan_source
from kvbake.bake.core.switch_coverage import check_coverage, raise_for_coverage, summary_lines
from kvbake.bake.core.diffs import FileChange
from kvbake.errors import ManifestError
from kvbake.manifest import Manifest, load_manifest

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
DATA = Path(__file__).resolve().parents[1] / "data" / "coverage"
UNREGISTERED = {"VLLM_EXL3_TF_PROMPT_ALIAS", "VLLM_EXL3_TF_PROMPT_TRANSIENT", "VLLM_INDEXER_PREFILL_BUFFER_FACTOR"}


@dataclass(frozen=True)
class Declared:
    """The two name sets a check needs, without a whole manifest."""

    switches: dict = field(default_factory=dict)
    forbidden: dict = field(default_factory=dict)


def change(path: str, *lines: str) -> FileChange:
    return FileChange(path=path, change="modify", added_lines=tuple(line + "\n" for line in lines))


def names(found: dict) -> set[str]:
    return set(found)


# --- added lines (regex over fragments) ---------------------------------------------------------------------------

@pytest.mark.parametrize("line", [
    'x = os.environ["FOO_BAR"]',
    "x = os.environ.get('FOO_BAR', '0')",
    'x = os.getenv("FOO_BAR")',
    'x = environ.get("FOO_BAR")',
    'x = getenv("FOO_BAR", None)',
    'if "FOO_BAR" in os.environ:',
    'if "FOO_BAR" not in environ:',
    "if envs.FOO_BAR and ready:",
    "if vllm.envs.FOO_BAR:",
    'if envs.is_set("FOO_BAR"):',
])
def test_added_line_reads(line: str) -> None:
    found = scan_added_lines("0001", [change("pkg/mod.py", line)])
    assert found == {"FOO_BAR": [Where("0001", "pkg/mod.py", READS)]}


@pytest.mark.parametrize("line", [
    '# os.environ["FOO_BAR"] is read elsewhere',
    'os.environ["FOO_BAR"] = "1"',
    'x = os.environ["foo_bar"]',
    'x = os.environ["AB"]',
    'x = self.environ.get("FOO_BAR")',
    'raise ValueError(f"FOO_BAR={raw!r} is not supported")',
    "x = envs.FOO_BARbaz",
    "FOO_BAR: bool = False",
])
def test_added_line_non_reads(line: str) -> None:
    assert scan_added_lines("0001", [change("pkg/mod.py", line)]) == {}


def test_a_read_split_over_two_added_lines_is_found() -> None:
    found = scan_added_lines("0001", [change("pkg/mod.py", "value = os.getenv(", '    "FOO_BAR", "0"', ")")])
    assert names(found) == {"FOO_BAR"}


def test_non_python_files_are_not_scanned() -> None:
    assert scan_added_lines("0001", [change("pkg/run.sh", 'x = os.environ["FOO_BAR"]')]) == {}


def test_envs_py_added_lines_register() -> None:
    lines = ('    "VLLM_A_ONE": lambda: bool(', '        int(os.getenv("VLLM_A_ONE", "0"))', "    ),",
             '    "VLLM_A_TWO": env_with_choices("VLLM_A_TWO", None, ["3"]),', '    "VLLM_A_THREE":', '    lambda: os.getenv("VLLM_A_THREE"),',
             "    VLLM_A_FOUR: bool = False")
    found = scan_added_lines("0057", [change("vllm/envs.py", *lines)])
    assert names(found) == {"VLLM_A_ONE", "VLLM_A_TWO", "VLLM_A_THREE"}
    assert all(w.how == REGISTERS for places in found.values() for w in places)


# --- whole files (ast) --------------------------------------------------------------------------------------------

SOURCE = '''
import os as _os
from os import environ as E, getenv as G
import vllm.envs as venvs
from vllm import envs
from vllm.envs import VLLM_FROM_IMPORT

a = _os.environ["VIA_ALIAS"]
b = E.get("VIA_FROM_ENVIRON")
c = G("VIA_FROM_GETENV")
d = "VIA_IN" in _os.environ
e = venvs.VIA_ENVS_ALIAS
f = envs.VIA_ENVS
g = envs.is_set("VIA_IS_SET")
_os.environ["WRITTEN_ONLY"] = "1"
h = {"NOT_A_READ": 1}
i = os_like.environ["OTHER_OBJECT"]
j = "\\d"  # an invalid escape must not turn into a test failure
'''


def test_scan_source_follows_imports_and_aliases() -> None:
    assert scan_source("pkg/mod.py", SOURCE) == {
        "VLLM_FROM_IMPORT", "VIA_ALIAS", "VIA_FROM_ENVIRON", "VIA_FROM_GETENV", "VIA_IN", "VIA_ENVS_ALIAS", "VIA_ENVS", "VIA_IS_SET",
    }


def test_scan_source_falls_back_to_the_regex_on_broken_python() -> None:
    assert scan_source("pkg/mod.py", 'x = os.getenv("FOO_BAR"\ndef (:\n') == {"FOO_BAR"}
    assert scan_source("pkg/notes.txt", 'os.getenv("FOO_BAR")') == set()


def test_registry_reads_in_envs_py_are_registrations_not_reads() -> None:
    text = (DATA / "envs_sample.py").read_text()
    assert scan_source("vllm/envs.py", text) == {"VLLM_USED_OUTSIDE"}
    assert scan_source("other/envs.py", text) >= {"VLLM_PLAIN", "VLLM_USED_OUTSIDE"}


def test_registered_names() -> None:
    text = (DATA / "envs_sample.py").read_text()
    assert registered_names(text) == {"VLLM_PLAIN", "VLLM_CHOICES", "VLLM_SPLIT_KEY", "VLLM_LATE", "VLLM_HELPER_ONLY"}


def test_registered_names_of_the_standin_envs() -> None:
    registry = registered_names((STANDIN / "overlay" / "vllm" / "envs.py").read_text())
    assert {"VLLM_DSV41_KV_PAIR", "VLLM_DSV41_DROP_MTP_BUFFER", "VLLM_DSV41_NVFP4_KV", "VLLM_DSV41_KV_DISPLAY"} <= registry
    assert not UNREGISTERED & registry
    assert len(registry) > 100


# --- rules on small chains ----------------------------------------------------------------------------------------

ENVS = 'import os\nenvironment_variables = {\n    "VLLM_BASE_ONE": lambda: os.getenv("VLLM_BASE_ONE"),\n    "VLLM_NEW": lambda: os.getenv("VLLM_NEW"),\n}\n'
MOD = 'import os\nimport vllm.envs as envs\nif envs.VLLM_NEW:\n    pass\nif envs.VLLM_BASE_ONE:\n    pass\n'


def small_chain() -> tuple[dict, dict]:
    changes = {
        "0001": (change("vllm/envs.py", '    "VLLM_NEW": lambda: os.getenv("VLLM_NEW"),'),),
        "0002": (change("vllm/mod.py", "if envs.VLLM_NEW:", "    pass", "if envs.VLLM_BASE_ONE:", "    pass"),),
    }
    return changes, {"vllm/envs.py": ENVS.encode(), "vllm/mod.py": MOD}


def test_a_declared_chain_passes_and_base_names_are_ignored() -> None:
    changes, tree = small_chain()
    report = check_coverage(Declared({"VLLM_NEW": None}), changes, tree)
    assert report.ok and report.warnings == ()
    assert report.base_names == ("VLLM_BASE_ONE",)
    assert report.reads["VLLM_NEW"] == (Where("0001", "vllm/envs.py", REGISTERS), Where("0002", "vllm/mod.py", READS))
    raise_for_coverage(report)


def test_an_undeclared_read_names_the_name_patch_and_file() -> None:
    changes, tree = small_chain()
    report = check_coverage(Declared(), changes, tree)
    assert report.errors == ("VLLM_NEW is read by the code but not declared as a switch or forbidden "
                             "(patch 0001 vllm/envs.py (registry), patch 0002 vllm/mod.py)",)


def test_a_registration_alone_must_be_declared_too() -> None:
    changes = {"0001": (change("vllm/envs.py", '    "VLLM_NEW": lambda: os.getenv("VLLM_NEW"),'),)}
    report = check_coverage(Declared(), changes, {"vllm/envs.py": ENVS})
    assert report.errors == ("VLLM_NEW is registered by the code but not declared as a switch or forbidden "
                             "(patch 0001 vllm/envs.py (registry))",)


def test_a_forbidden_name_counts_as_declared_and_need_not_be_read() -> None:
    changes, tree = small_chain()
    report = check_coverage(Declared({}, {"VLLM_NEW": "never", "VLLM_UNUSED": "never"}), changes, tree)
    assert report.ok


def test_a_switch_only_registered_is_dead() -> None:
    changes = {"0001": (change("vllm/envs.py", '    "VLLM_NEW": lambda: os.getenv("VLLM_NEW"),'),)}
    report = check_coverage(Declared({"VLLM_NEW": None}), changes, {"vllm/envs.py": ENVS})
    assert report.errors == ("switch VLLM_NEW is a dead switch: declared in the manifest but no code of the chain reads it",)


def test_a_switch_read_only_by_base_code_of_a_patched_file_is_live() -> None:
    changes, tree = small_chain()
    report = check_coverage(Declared({"VLLM_NEW": None, "VLLM_BASE_ONE": None}), changes, tree)
    assert report.ok


def test_an_unregistered_vllm_switch_is_a_warning_naming_it() -> None:
    changes = {"0001": (change("vllm/mod.py", 'x = os.environ.get("VLLM_PLUGIN_X", "")', 'y = os.getenv("OTHER_X")'),)}
    tree = {"vllm/mod.py": 'import os\nx = os.environ.get("VLLM_PLUGIN_X", "")\ny = os.getenv("OTHER_X")\n', "vllm/envs.py": ENVS}
    report = check_coverage(Declared({"VLLM_PLUGIN_X": None, "OTHER_X": None}), changes, tree)
    assert report.ok
    assert len(report.warnings) == 1
    assert report.warnings[0].startswith("switch VLLM_PLUGIN_X is not registered in vllm/envs.py: vLLM warns about unregistered VLLM_*")
    assert "fail_on_environ_validation" in report.warnings[0]


def test_without_any_envs_py_the_registry_is_unchecked() -> None:
    changes = {"0001": (change("vllm/mod.py", 'x = os.getenv("VLLM_PLUGIN_X")'),)}
    report = check_coverage(Declared({"VLLM_PLUGIN_X": None}), changes, {"vllm/mod.py": 'import os\nx = os.getenv("VLLM_PLUGIN_X")\n'})
    assert report.registry == "unchecked"
    assert report.warnings[0].startswith("the vLLM registry could not be checked")
    assert "VLLM_PLUGIN_X" in report.warnings[0]


def test_a_given_base_envs_is_used_when_the_chain_does_not_touch_it() -> None:
    changes = {"0001": (change("vllm/mod.py", "if envs.VLLM_BASE_ONE:", 'x = os.getenv("VLLM_PLUGIN_X")'),)}
    tree = {"vllm/mod.py": 'import os\nif envs.VLLM_BASE_ONE:\n    pass\nx = os.getenv("VLLM_PLUGIN_X")\n'}
    report = check_coverage(Declared({"VLLM_PLUGIN_X": None}), changes, tree, base_envs_text=ENVS)
    assert report.ok and report.registry == "base vllm/envs.py"
    assert report.base_names == ("VLLM_BASE_ONE",)
    assert [w.split(":")[0] for w in report.warnings] == ["switch VLLM_PLUGIN_X is not registered in vllm/envs.py"]


def test_raise_for_coverage_joins_every_error_on_one_line() -> None:
    changes, tree = small_chain()
    report = check_coverage(Declared({"VLLM_GHOST": None}), changes, tree)
    with pytest.raises(ManifestError) as caught:
        raise_for_coverage(report)
    text = str(caught.value)
    assert caught.value.exit_code == 3 and "\n" not in text
    assert text.startswith("switch coverage: 2 problem(s): ")
    assert "VLLM_NEW is read by the code but not declared" in text and "VLLM_GHOST is a dead switch" in text
    assert "; fix: declare every name" in text


# --- the stand-in chain -------------------------------------------------------------------------------------------

def overlay_tree(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file() and f.name != "README.md"}


def coverage_of(manifest: Manifest):
    changes = {p.id: read_patch(p)[1] for p in manifest.chain}
    return check_coverage(manifest, changes, overlay_tree(STANDIN / "overlay"))


def standin_copy(tmp_path: Path, edit) -> Manifest:
    """A copy of the stand-in manifest and patches with `edit` applied to the YAML document."""
    shutil.copytree(STANDIN / "patches", tmp_path / "patches")
    document = yaml.safe_load((STANDIN / "manifest.yaml").read_text())
    edit(document)
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return load_manifest(tmp_path / "manifest.yaml")


def test_the_standin_chain_passes_with_the_expected_warnings() -> None:
    report = coverage_of(load_manifest(STANDIN / "manifest.yaml"))
    assert report.errors == ()
    assert report.warnings == (f"3 switches are not registered in vllm/envs.py ({', '.join(sorted(UNREGISTERED))}): "
                               "vLLM warns about unregistered VLLM_* variables at boot and refuses to start with "
                               "fail_on_environ_validation; register them in vllm/envs.py, or never start with that option",)
    assert report.registry == "patched vllm/envs.py"
    assert set(report.reads) == {"VLLM_DSV41_KV_PAIR", "VLLM_DSV41_DROP_MTP_BUFFER", "VLLM_DSV41_NVFP4_KV", "VLLM_DSV41_KV_DISPLAY"} | UNREGISTERED
    assert report.reads["VLLM_DSV41_KV_DISPLAY"][-1] == Where("0076", "vllm/v1/worker/gpu_worker.py", READS)
    assert report.base_names == ()
    assert summary_lines(report)[-1].startswith("warning: 3 switches are not registered in vllm/envs.py (VLLM_EXL3_TF_PROMPT_ALIAS, ")


def test_lock_and_build_log_the_unregistered_switches_once(caplog: pytest.LogCaptureFixture) -> None:
    from kvbake.bake.adapters.pinning import check_switch_coverage

    manifest = load_manifest(STANDIN / "manifest.yaml")
    with caplog.at_level("WARNING"):
        check_switch_coverage(manifest, overlay_tree(STANDIN / "overlay"))
    lines = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(lines) == 1, lines
    assert lines[0].startswith("switch coverage: 3 switches are not registered in vllm/envs.py (")
    assert all(name in lines[0] for name in UNREGISTERED)


def drop_switch(name: str):
    def edit(document: dict) -> None:
        del document["switches"][name]
        for preset in document["presets"].values():
            preset["switches"].pop(name, None)
    return edit


def test_a_standin_copy_without_a_switch_fails_naming_it(tmp_path: Path) -> None:
    report = coverage_of(standin_copy(tmp_path, drop_switch("VLLM_INDEXER_PREFILL_BUFFER_FACTOR")))
    assert report.errors == ("VLLM_INDEXER_PREFILL_BUFFER_FACTOR is read by the code but not declared as a switch or forbidden "
                             "(patch 0060 vllm/models/deepseek_v41/attention.py)",)
    with pytest.raises(ManifestError) as caught:
        raise_for_coverage(report)
    assert caught.value.exit_code == 3
    assert all(field in caught.value.message for field in (
        "switch coverage", "1 problem", "VLLM_INDEXER_PREFILL_BUFFER_FACTOR", "patch 0060 vllm/models/deepseek_v41/attention.py"))
    assert "every name the chain reads" in caught.value.fix


def test_a_standin_copy_without_a_forbidden_name_fails(tmp_path: Path) -> None:
    report = coverage_of(standin_copy(tmp_path, lambda d: d["forbidden"].pop("VLLM_DSV41_KV_DISPLAY")))
    assert len(report.errors) == 1
    assert report.errors[0].startswith("VLLM_DSV41_KV_DISPLAY is read by the code but not declared")
    assert "patch 0057 vllm/envs.py (registry), patch 0076 vllm/v1/worker/gpu_worker.py" in report.errors[0]


def test_a_standin_copy_with_an_extra_switch_has_a_dead_switch(tmp_path: Path) -> None:
    def edit(document: dict) -> None:
        document["switches"]["VLLM_DSV41_NEVER_READ"] = {"values": ["1"], "summary": "declared, read by nothing"}

    report = coverage_of(standin_copy(tmp_path, edit))
    assert report.errors == ("switch VLLM_DSV41_NEVER_READ is a dead switch: declared in the manifest but no code of the chain reads it",)
    assert len(report.warnings) == 1 and report.warnings[0].startswith("4 switches are not registered in vllm/envs.py (")
    assert "VLLM_DSV41_NEVER_READ" in report.warnings[0]
    with pytest.raises(ManifestError) as caught:
        raise_for_coverage(report)
    assert caught.value.exit_code == 3
    assert all(field in caught.value.message for field in ("switch coverage", "1 problem", "VLLM_DSV41_NEVER_READ", "dead switch"))
    assert "every name the chain reads" in caught.value.fix
