"""Shared by the kv_arith command-line tests: run the entry point in memory, and a V4.1-Flash config file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kvbake.kvarith.cli import main
from kvbake.kvarith.examples import v41_flash_config


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(v41_flash_config()))
    return str(path)
