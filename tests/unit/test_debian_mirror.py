"""scripts/debian_mirror.py: the Debian mirror the machine's own apt sources name, in both source formats."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "scripts"))

import debian_mirror  # noqa: E402

ARCHIVE = "http://mirror.example/debian"
ONE_LINE = f"""\
# deb http://commented.example/debian bookworm main
deb-src {ARCHIVE}-src bookworm main
deb http://security.example/debian-security bookworm-security main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {ARCHIVE}/ bookworm main contrib
deb http://second.example/debian bookworm main
"""
DEB822 = f"""\
Types: deb
URIs: http://apt.example/vendor
Suites: stable-vendor
Components: main

Types: deb deb-src
# http://commented.example/debian
URIs: {ARCHIVE}
  http://second.example/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.example/debian-security
Suites: trixie-security
Components: main
"""


def etc_apt(tmp_path: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        (tmp_path / "etc" / "apt" / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "etc" / "apt" / relative).write_text(text)
    (tmp_path / "etc" / "apt" / "sources.list.d").mkdir(parents=True, exist_ok=True)
    return tmp_path


def test_the_one_line_format_gives_its_first_debian_archive() -> None:
    assert debian_mirror.first_archive(debian_mirror.one_line_entries(ONE_LINE)) == ARCHIVE


def test_the_deb822_format_gives_its_first_debian_archive() -> None:
    assert debian_mirror.first_archive(debian_mirror.deb822_entries(DEB822)) == ARCHIVE


def test_a_disabled_stanza_and_other_sources_are_skipped() -> None:
    disabled = DEB822.replace("Types: deb deb-src\n", "Types: deb deb-src\nEnabled: no\n")
    assert debian_mirror.first_archive(debian_mirror.deb822_entries(disabled)) is None
    assert debian_mirror.first_archive(debian_mirror.one_line_entries("deb http://ports.example/ubuntu noble main\n")) is None
    assert debian_mirror.first_archive(debian_mirror.one_line_entries("deb http://flat.example/repo ./\n")) is None
    assert debian_mirror.first_archive(debian_mirror.one_line_entries("deb http://apt.example/code stable main\n")) is None
    assert debian_mirror.first_archive(debian_mirror.one_line_entries(f"deb {ARCHIVE} stable main\n")) == ARCHIVE


def test_sources_list_comes_first_then_the_folder_in_name_order(tmp_path: Path) -> None:
    root = etc_apt(tmp_path, {"sources.list.d/b.list": "deb http://b.example/debian bookworm main\n",
                              "sources.list.d/a.sources": DEB822.replace(ARCHIVE, "http://a.example/debian"),
                              "sources.list.d/c.list.disabled": "deb http://c.example/debian bookworm main\n"})
    assert debian_mirror.mirror(root) == "http://a.example/debian"
    (root / "etc" / "apt" / "sources.list").write_text(ONE_LINE)
    assert debian_mirror.mirror(root) == ARCHIVE


def run(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "debian_mirror.py"), "--root", str(root)],
                          env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, check=False)


def test_the_override_wins_and_no_archive_is_one_line_naming_it(tmp_path: Path) -> None:
    root = etc_apt(tmp_path, {"sources.list.d/vendor.list": "deb http://apt.example/vendor stable main\n"})
    assert run(root, KVBAKE_DEBIAN_MIRROR="http://override.example/debian").stdout == "http://override.example/debian\n"
    failed = run(root)
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr.count("\n") == 1 and "KVBAKE_DEBIAN_MIRROR" in failed.stderr, failed.stderr
    (root / "etc" / "apt" / "sources.list").write_text(ONE_LINE)
    assert run(root).stdout == ARCHIVE + "\n"


@pytest.mark.parametrize("script", ["install_engines.sh", "debian13_chroot.sh"])
def test_the_scripts_name_no_mirror_host_and_ask_the_helper(script: str) -> None:
    text = (ROOT / "scripts" / script).read_text()
    assert re.search(r"(?:https?|ftp)://", text) is None, "the script names a mirror itself"
    assert "debian_mirror.py" in text
