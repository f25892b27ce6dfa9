"""requirements.lock pins the runtime dependencies, then the test and docs extras', with hashes; each install takes its part."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = "# --- test extra"
PIN = re.compile(r"^(?P<name>[a-z0-9-]+)==(?P<version>\S+) \\$")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, its sha256 hashes) of every pin in a part of the lock."""
    found: dict[str, tuple[str, list[str]]] = {}
    name = None
    for line in text.splitlines():
        match = PIN.match(line)
        if match:
            name = match["name"]
            assert name not in found, f"{name} pinned twice"
            found[name] = (match["version"], [])
        elif line.strip().startswith("--hash=sha256:"):
            assert name is not None, line
            found[name][1].append(line.strip().removesuffix(" \\").split(":", 1)[1])
    return found


def parts() -> tuple[dict, dict]:
    text = (ROOT / "requirements.lock").read_text()
    assert text.count(MARKER) == 1, "one test marker"
    runtime, test = text.split(MARKER)
    return pins(runtime), pins(test.split("\n", 1)[1])


def declared(key: str | None) -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    entries = project["dependencies"] if key is None else project["optional-dependencies"][key]
    return {normalized(entry.split("==")[0]): entry.split("==")[1] for entry in entries}


def test_every_declared_dependency_is_pinned_at_its_version_in_its_part():
    runtime, test = parts()
    assert {name: runtime[name][0] for name in declared(None)} == declared(None)
    assert {name: test[name][0] for name in declared("test")} == declared("test")
    assert {name: test[name][0] for name in declared("docs")} == declared("docs"), "the docs tools are test-side pins"
    assert not set(runtime) & set(test), "a package the runtime needs stays in the runtime part"
    assert {"pluggy", "iniconfig", "sortedcontainers"} <= set(test), "the test extra's own dependencies are pinned too"


def test_every_pin_carries_sha256_hashes():
    for name, (version, hashes) in {**parts()[0], **parts()[1]}.items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in hashes), (name, version)


def test_the_operator_install_takes_the_runtime_part_and_the_test_set_up_all_of_it():
    operator = (ROOT / "scripts" / "install_operator.sh").read_text()
    expression = re.search(r"sed '(?P<expr>[^']+)' requirements\.lock", operator)["expr"]
    kept = subprocess.run(["sed", expression, str(ROOT / "requirements.lock")], capture_output=True, text=True, check=True).stdout
    assert pins(kept) == parts()[0]
    assert '--require-hashes -r "$RUNTIME"' in operator
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "--require-hashes -r requirements.lock" in setup and "--no-deps -e ." in setup
    assert '".[test]"' not in setup, "the test set-up installs the pinned test extra, not a fresh resolution"
