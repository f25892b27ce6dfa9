"""scripts/test.sh's passes: the tests that need no engine apart from the docker tests, the default engine's selection,
and the split of the store-agnostic docker tests between the two Docker 26.1 passes (each such test runs on exactly one
store, and every other docker test on both)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kvbake_rig.pass_order import pass_rank

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = (ROOT / "scripts" / "test.sh").read_text()
MARKS = ("once_on_classic", "once_on_containerd")


def shell_function(name: str) -> str:
    """The text of one shell function of test.sh."""
    function = SCRIPT[SCRIPT.index(f"{name}() {{"):]
    return function[:function.index("\n}\n") + 3]


def bash(script: str) -> str:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.strip()


def store_split(split: str, profile: str) -> str:
    """What test.sh's store_split prints for `profile` when the run has (`split=yes`) or lacks both stores."""
    return bash(f"{shell_function('store_split')}\nsplit={split}\nstore_split {profile}")


@pytest.mark.parametrize(("profiles", "both"), [
    ("docker-20.10-classic docker-26.1-classic docker-26.1-containerd", "yes"),  # Debian 12: the default, then the others
    ("docker-26.1-classic docker-26.1-containerd", "yes"),  # Debian 13
    ("docker-26.1-containerd docker-26.1-classic", "yes"),
    ("docker-20.10-classic", ""),  # KVBAKE_PROFILES=default
    ("docker-26.1-classic", ""),
    ("docker-20.10-classic docker-26.1-containerd", ""),
])
def test_the_split_is_on_only_when_the_run_has_docker_26_1_on_both_stores(profiles, both):
    assert bash(f"{shell_function('both_stores')}\nboth_stores {profiles}") == both


@pytest.mark.parametrize(("split", "profile", "clause"), [
    ("yes", "docker-26.1-classic", "and not once_on_containerd"),
    ("yes", "docker-26.1-containerd", "and not once_on_classic"),
    ("yes", "docker-20.10-classic", ""),
    ("", "docker-26.1-classic", ""),
    ("", "docker-26.1-containerd", ""),
])
def test_each_store_leaves_out_the_other_store_s_tests_only_when_the_run_has_both(split, profile, clause):
    assert store_split(split, profile) == clause


def marks_of(path: Path) -> set[str]:
    return set(re.findall(r"pytest\.mark\.(once_on_\w+)", path.read_text()))


def test_no_test_module_is_marked_for_both_stores_and_every_marked_one_is_a_docker_test():
    marked = {path.name: marks_of(path) for path in sorted((ROOT / "tests" / "integration").glob("test_*.py")) if marks_of(path)}
    assert marked, "the split marks some modules"
    assert all(len(marks) == 1 and marks <= set(MARKS) for marks in marked.values()), marked
    for name in marked:
        assert "pytest.mark.docker" in (ROOT / "tests" / "integration" / name).read_text(), f"{name} is no docker test"


def docker_selection(profile: str, profiles: str = "all", split: str = "") -> str:
    """The -m expression test.sh gives the default engine's pass."""
    functions = "\n".join(shell_function(name) for name in ("store_split", "docker_selection"))
    return bash(f"{functions}\nsplit={split}\ndocker_selection {profile} {profiles}")


@pytest.mark.parametrize(("profile", "profiles", "split", "expression"), [
    ("docker-20.10-classic", "all", "yes", "docker and not field_engines_only and (default_engine_only or every_engine)"),
    ("docker-20.10-classic", "default", "", "docker and not field_engines_only"),
    ("docker-26.1-classic", "all", "yes", "docker and not once_on_containerd"),  # Debian 13
    ("docker-26.1-classic", "default", "", "docker"),
])
def test_the_default_engine_s_pass_selects_docker_tests_only(profile, profiles, split, expression):
    assert docker_selection(profile, profiles, split) == expression


def test_every_integration_module_is_a_docker_test_so_the_pass_without_an_engine_never_reaches_one():
    assert '-m "not docker"' in SCRIPT and "nice -n 10" in SCRIPT
    modules = sorted((ROOT / "tests" / "integration").glob("test_*.py"))
    assert modules and all("pytest.mark.docker" in path.read_text() for path in modules), \
        [path.name for path in modules if "pytest.mark.docker" not in path.read_text()]


REAL_RAY = ("kvbake_rig.launchers", "REAL_RAY_SHAPES", "GcsWatch")


def test_every_module_that_runs_real_ray_holds_the_fixed_ports_and_runs_in_one_pass():
    """Real Ray binds fixed ports on the host network (the launchers' 6379 and 8265, Ray's client server 10001 on the
    head's address): each module that runs it runs on one store only, and holds the machine-wide fixed-ports lock while
    Ray runs, so two passes at the same time (the classic store's and the containerd store's) take turns."""
    ray_modules = {path.name: marks_of(path) for path in sorted((ROOT / "tests" / "integration").glob("test_*.py"))
                   if any(word in path.read_text() for word in REAL_RAY)}
    assert {"test_community_launchers.py", "test_launcher_eugr.py", "test_real_ray_shapes.py"} <= set(ray_modules)
    assert all(len(marks) == 1 for marks in ray_modules.values()), ray_modules
    unlocked = [name for name in ray_modules
                if not re.search(r"fixed_ports_held\(\)|\bfixed_ports: None\b", (ROOT / "tests" / "integration" / name).read_text())]
    assert unlocked == [], f"modules that run real Ray without the fixed-ports lock: {unlocked}"


def order_marks_of(path: Path) -> set[str]:
    return set(re.findall(r"pytest\.mark\.(runs_first|runs_last)\b", path.read_text()))


def test_the_real_ray_walks_run_first_in_the_containerd_pass_and_last_in_the_classic_pass():
    """The two Docker 26.1 passes start together: the containerd pass's real-Ray walks run first and the classic pass's
    last, so neither waits for the other's fixed ports."""
    for path in sorted((ROOT / "tests" / "integration").glob("test_*.py")):
        if not any(word in path.read_text() for word in REAL_RAY):
            assert not order_marks_of(path), f"{path.name} runs no real Ray: it keeps pytest's order"
            continue
        expected = {"once_on_containerd": {"runs_first"}, "once_on_classic": {"runs_last"}}[marks_of(path).pop()]
        assert order_marks_of(path) == expected, path.name


def test_a_pass_runs_first_marked_modules_first_and_last_marked_ones_last_keeping_each_groups_order():
    class Item:
        def __init__(self, name: str, *marks: str) -> None:
            self.name, self.marks = name, [getattr(pytest.mark, mark).mark for mark in marks]

        def iter_markers(self):
            return iter(self.marks)

    items = [Item("a", "runs_last"), Item("b"), Item("c", "runs_first", "docker"), Item("d"), Item("e", "runs_last"), Item("f", "runs_first")]
    assert [item.name for item in sorted(items, key=pass_rank)] == ["c", "f", "b", "d", "a", "e"]
