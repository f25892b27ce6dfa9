"""A directory's metadata from the head of `docker cp CONTAINER:PATH -`, over a stand-in docker program on the client's command line."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from types import SimpleNamespace

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.archive_head import dir_meta_of, first_entry
from kvbake.engines.core.savefile import DirMeta
from kvbake.errors import EngineError

from message_words import says

# The stand-in docker: writes down its argv, then answers with the archive in FAKE_DOCKER_ARCHIVE (its path), or with
# FAKE_DOCKER_STDERR (its bytes as the environment holds them) and FAKE_DOCKER_EXIT.
FAKE_DOCKER = """
import json, os, sys
with open(os.environ["FAKE_DOCKER_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
archive = os.environ.get("FAKE_DOCKER_ARCHIVE")
if archive:
    with open(archive, "rb") as handle:
        sys.stdout.buffer.write(handle.read())
    sys.stdout.flush()
sys.stderr.buffer.write(os.environb.get(b"FAKE_DOCKER_STDERR", b""))
sys.exit(int(os.environ.get("FAKE_DOCKER_EXIT", "0")))
"""


def tar_of(*entries: tarfile.TarInfo, data: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for entry in entries:
            tar.addfile(entry, io.BytesIO(data) if entry.isfile() else None)
    return buffer.getvalue()


def entry(name: str, kind: bytes = tarfile.DIRTYPE, mode: int = 0o40755, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime, info.size = kind, mode, 1000, 1001, 1_700_000_000.75, size
    return info


@pytest.fixture()
def docker(tmp_path, monkeypatch) -> SimpleNamespace:
    script = tmp_path / "docker.py"
    script.write_text(FAKE_DOCKER, encoding="utf-8")
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    engine = Engine.__new__(Engine)
    engine.host = engine.label = "unix:///node.sock"
    engine.client = SimpleNamespace(client_config=SimpleNamespace(docker_cmd=[sys.executable, str(script), "--host", "h"]))

    def answer(archive: bytes | None = None, stderr: str = "", code: int = 0) -> None:
        if archive is not None:
            (tmp_path / "answer.tar").write_bytes(archive)
            monkeypatch.setenv("FAKE_DOCKER_ARCHIVE", str(tmp_path / "answer.tar"))
        else:
            monkeypatch.delenv("FAKE_DOCKER_ARCHIVE", raising=False)
        monkeypatch.setenv("FAKE_DOCKER_STDERR", stderr)
        monkeypatch.setenv("FAKE_DOCKER_EXIT", str(code))
    return SimpleNamespace(engine=engine, answer=answer, calls=lambda: [json.loads(line) for line in log.read_text().splitlines()])


def test_a_directory_s_mode_owner_and_whole_second_mtime_come_from_the_first_entry(docker):
    docker.answer(tar_of(entry("lib"), entry("lib/a.py", tarfile.REGTYPE, 0o100644, 3), data=b"abc"))
    assert docker.engine.dir_meta("c1", "/usr/lib") == DirMeta(0o755, 1000, 1001, 1_700_000_000)
    assert docker.calls() == [["--host", "h", "container", "cp", "c1:/usr/lib", "-"]]


def test_a_file_is_no_directory_and_an_absent_path_is_none(docker):
    docker.answer(tar_of(entry("a.py", tarfile.REGTYPE, 0o100644, 3), data=b"abc"))
    assert docker.engine.dir_meta("c1", "/usr/a.py") is None
    for missing in ("Error: Could not find the file /usr/x in container c1", "Error: No such container:path: c1:/usr/x"):
        docker.answer(stderr=missing + "\n", code=1)
        assert docker.engine.dir_meta("c1", "/usr/x") is None


def test_any_other_refusal_is_an_engine_error_naming_the_path_and_the_reason(docker):
    docker.answer(stderr="Error response from daemon: permission denied\n", code=1)
    with pytest.raises(EngineError) as caught:
        docker.engine.dir_meta("c1", "/usr/lib")
    assert caught.value.exit_code == 8 and says(caught.value.message, "reading /usr/lib in c1 failed (Error response from daemon: permission denied)")
    assert says(caught.value.message, "unix:///node.sock") and says(caught.value.fix, "check the engine")
    docker.answer(code=3)
    with pytest.raises(EngineError) as caught:
        docker.engine.dir_meta("c1", "/usr/lib")
    assert says(caught.value.message, "(exit 3)")


def test_a_refusal_whose_text_is_not_utf_8_is_reported_with_replacement_characters(docker):
    docker.answer(stderr=os.fsdecode(b"permission denied \xff\n"), code=1)
    with pytest.raises(EngineError) as caught:
        docker.engine.dir_meta("c1", "/usr/lib")
    assert says(caught.value.message, "permission denied \N{REPLACEMENT CHARACTER}")


def test_a_directory_read_before_the_copy_failed_still_counts(docker):
    docker.answer(tar_of(entry("lib")), stderr="broken pipe\n", code=1)
    assert docker.engine.dir_meta("c1", "/usr/lib") == DirMeta(0o755, 1000, 1001, 1_700_000_000)


def test_the_first_entry_of_a_stream_and_nothing_for_a_stream_that_is_no_archive():
    assert first_entry(io.BytesIO(tar_of(entry("x"), entry("x/y")))).name == "x"
    assert first_entry(io.BytesIO(b"")) is None and first_entry(io.BytesIO(b"not an archive" * 100)) is None
    assert dir_meta_of(None) is None and dir_meta_of(entry("l", tarfile.SYMTYPE, 0o120777)) is None
    assert dir_meta_of(entry("d", mode=0o41777)) == DirMeta(0o1777, 1000, 1001, 1_700_000_000)



def test_the_copy_is_stopped_after_the_first_entry_of_a_large_folder(docker):
    docker.answer(tar_of(entry("lib"), entry("lib/big.bin", tarfile.REGTYPE, 0o100644, 4 << 20), data=b"\0" * (4 << 20)))
    assert docker.engine.dir_meta("c1", "/usr/lib") == DirMeta(0o755, 1000, 1001, 1_700_000_000)
