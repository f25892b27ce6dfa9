"""Write requirements.lock: every runtime dependency of kvbake, then every further one of its test and docs extras, at
the exact version a fresh resolution picks, with the sha256 of each of its files on the package index (all platforms,
so arm64 and x86 hosts install from one file)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX_ENV = "PIP_INDEX_URL"
HEADER = ("# kvbake's dependencies, pinned with hashes; written by scripts/lock_requirements.py, do not edit.\n"
          "# Operators install the part above the test marker: scripts/install_operator.sh.\n"
          "# The test set-up installs all of it: pip install --require-hashes -r requirements.lock && pip install --no-deps -e .\n")
TEST_MARKER = ("# --- test extra: pytest, hypothesis, the docs tools (mkdocs, mkdocs-material) and what they need beyond the "
               "runtime dependencies ---\n")


def resolved(target: str) -> dict[str, str]:
    """name -> version that pip resolves for `target` (the project, or the project with an extra) from nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                        target], check=True)
        install = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in install if item["metadata"]["name"] != "kvbake"}


def sections(runtime: dict[str, str], everything: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(runtime pins, test-only pins); the test and docs extras may add packages but must not move a runtime one."""
    moved = sorted(name for name, version in runtime.items() if everything.get(name) != version)
    if moved:
        raise SystemExit(f"lock_requirements: the test and docs extras resolve {', '.join(moved)} to another version than "
                         "the runtime does")
    return runtime, {name: version for name, version in everything.items() if name not in runtime}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def package_index() -> str:
    """The simple index pip itself uses on this machine: $PIP_INDEX_URL, pip's configured index-url, else pip's own
    default; the project names no index."""
    import os

    if os.environ.get(INDEX_ENV):
        return os.environ[INDEX_ENV].rstrip("/")
    configured = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True)
    if configured.returncode == 0 and configured.stdout.strip():
        return configured.stdout.strip().rstrip("/")
    from pip._internal.models.index import PyPI

    return PyPI.simple_url.rstrip("/")


def file_hashes(name: str, version: str) -> list[str]:
    """sha256 of every file of `name==version` the index lists."""
    index = package_index()
    with urllib.request.urlopen(f"{index}/{normalized(name)}/", timeout=60) as reply:  # noqa: S310 - the machine's own index
        page = reply.read().decode()
    stem = re.escape(re.sub(r"[-_.]+", "_", name).lower())
    pattern = re.compile(rf'href="[^"]*/({stem}|{re.escape(normalized(name))})-{re.escape(version)}(-|\.tar\.gz|\.zip)[^"#]*#sha256=([0-9a-f]{{64}})"',
                         re.IGNORECASE)
    hashes = sorted({match.group(3) for match in pattern.finditer(page)})
    if not hashes:
        raise SystemExit(f"lock_requirements: no files of {name}=={version} on {index}")
    return hashes


def pinned(pins: dict[str, str]) -> str:
    lines = []
    for name in sorted(pins, key=normalized):
        hashes = " \\\n    ".join(f"--hash=sha256:{digest}" for digest in file_hashes(name, pins[name]))
        lines.append(f"{normalized(name)}=={pins[name]} \\\n    {hashes}\n")
    return "".join(lines)


def render(runtime: dict[str, str], test: dict[str, str]) -> str:
    return HEADER + pinned(runtime) + TEST_MARKER + pinned(test)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when requirements.lock differs from a fresh resolution")
    args = parser.parse_args()
    text = render(*sections(resolved(str(ROOT)), resolved(f"{ROOT}[test,docs]")))
    target = ROOT / "requirements.lock"
    if args.check:
        same = target.exists() and target.read_text() == text
        print("requirements.lock is current" if same else "requirements.lock differs from a fresh resolution")
        return 0 if same else 1
    target.write_text(text)
    print(f"wrote {target.name}: {text.count('==')} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
