"""Engine's own calls over a recording stand-in of python-on-whales: arguments passed, absent versus refused, errors named."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from python_on_whales.exceptions import DockerException, NoSuchContainer, NoSuchImage

from kvbake.digests import sha256_digest
from kvbake.engines.adapters import client as module
from kvbake.engines.adapters import manifestcache
from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.detection import EngineProfile
from kvbake.errors import BaseImageError, EngineError, RegistryError
from kvbake.terminal import progress as terminal

from message_words import says
from test_container_ops import Recorder, refusal
from test_savefile import oci_save

HOST = "unix:///node.sock"
INFO = SimpleNamespace(server_version="26.1.5", driver="overlayfs", driver_status=[["driver-type", "io.containerd.snapshotter.v1"]],
                       architecture="aarch64", os_type="linux", system_time="2026-12-03T12:00:00.5Z")


def engine_with(host: str | None = HOST, config: Path | None = None, **answers) -> Engine:
    """An Engine whose python-on-whales client is recording stand-ins answering from `answers`."""
    engine = Engine.__new__(Engine)
    engine.host, engine.label, engine._profile = host, host or "the local docker engine", None
    engine.client = SimpleNamespace(system=Recorder(answers), image=Recorder(answers), container=Recorder(answers),
                                    client_config=SimpleNamespace(docker_cmd=["docker", "--host", "h"], config=config, client_call=["docker"]))
    top = Recorder(answers)
    engine.client.run, engine.client.version, engine.client.top = top.run, top.version, top
    return engine


def raised(call, kind=EngineError):
    with pytest.raises(kind) as caught:
        call()
    return caught.value


def test_a_new_engine_talks_to_its_host_with_its_login_store_and_is_labelled_by_it(monkeypatch):
    made = []
    monkeypatch.setattr(module, "DockerClient", lambda **kwargs: made.append(kwargs) or "client")
    engine = Engine(HOST, "/cfg")
    assert (engine.client, engine.label, engine.host, engine._profile) == ("client", HOST, HOST, None)
    assert made == [{"host": HOST, "config": "/cfg"}]
    assert Engine().label == "the local docker engine" and made[-1] == {"host": None, "config": None}


def test_ping_states_the_engine_facts_and_its_profile_and_asks_only_once_for_the_profile():
    engine = engine_with(info=INFO)
    assert engine.ping() == {"server_version": "26.1.5", "driver": "overlayfs", "driver_status": INFO.driver_status,
                             "architecture": "aarch64", "os_type": "linux", "profile": "docker-26.1-containerd"}
    assert engine.profile().name == "docker-26.1-containerd"
    fresh = engine_with(info=INFO)
    assert fresh.profile().store == "containerd" and fresh.profile().store == "containerd"
    assert [call[0] for call in fresh.client.system.calls] == ["info"], "the profile is asked of the engine once"


def test_an_engine_that_answers_info_without_a_server_is_unreachable_with_the_version_calls_reason():
    down = engine_with(info=SimpleNamespace(server_version=""), version=refusal(f"Cannot connect to the Docker daemon at {HOST}. Is it running?"))
    error = raised(down.ping)
    assert error.exit_code == 8 and error.message.count(HOST) == 1, "the label names the host once; the reason drops it"
    assert "is unreachable (Cannot connect to the Docker daemon. Is it running?)" in error.message
    assert error.fix.startswith("start the Docker service of that machine (kvbake never starts an engine)")
    silent = engine_with(info=SimpleNamespace(server_version=None), version=None)
    assert "docker info names no server" in raised(silent.ping).message
    assert [call[0] for call in silent.client.top.calls] == ["version"]


def test_an_unreachable_engine_keeps_the_whole_reason_when_no_host_was_given_and_an_old_engine_is_refused():
    local = engine_with(host=None, info=refusal("error during connect: at unix:///x.sock"))
    assert "(error during connect: at unix:///x.sock)" in raised(local.ping).message, "no host given: the reason is kept whole"
    old = engine_with(info=SimpleNamespace(**{**vars(INFO), "server_version": "19.03.1"}))
    assert "older than the oldest supported engine" in raised(old.ping).message


def test_the_engines_clock_is_its_info_system_time():
    assert engine_with(info=INFO).system_time() == "2026-12-03T12:00:00.5Z"
    error = raised(engine_with(info=refusal("clock\nbroken pipe")).system_time)
    assert error.exit_code == 8 and "reading the engine's clock failed (broken pipe)" in error.message and says(error.fix, "check that the node's engine is up")


def test_a_refusal_without_output_is_named_by_its_exit_code():
    silent = DockerException(["docker", "info"], 125, b"", b"")
    assert "(exit code 125)" in raised(engine_with(info=silent).system_time).message
    on_stdout = DockerException(["docker", "info"], 1, b"said on stdout\n", b"")
    assert "(said on stdout)" in raised(engine_with(info=on_stdout).system_time).message


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(manifestcache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def containerd_engine(**answers) -> Engine:
    engine = engine_with(**answers)
    engine._profile = EngineProfile("26.1.5", "containerd", "overlayfs")
    return engine


def test_a_cached_manifest_is_read_without_asking_the_engine_or_the_registry(cache):
    _, manifest = oci_save()
    digest = manifestcache.put(manifest)
    engine = containerd_engine(save=AssertionError("no save"))
    found = engine.store_manifest(digest, "base:1", fetch=lambda d: pytest.fail("fetched"))
    assert found.data == manifest and engine.client.image.calls == []


def test_a_fetched_manifest_that_hashes_to_the_id_is_kept_in_the_cache(cache):
    _, manifest = oci_save()
    digest = sha256_digest(manifest)
    asked = []
    engine = containerd_engine(save=AssertionError("no save"))
    found = engine.store_manifest(digest, "base:1", fetch=lambda d: asked.append(d) or manifest)
    assert found.config_digest == found.document["config"]["digest"] and asked == [digest]
    assert manifestcache.get(digest) == manifest and engine.client.image.calls == []


def test_a_manifest_neither_cached_nor_fetched_is_read_once_from_docker_save(cache):
    saved, manifest = oci_save()
    digest = sha256_digest(manifest)
    engine = containerd_engine(save=lambda reference: iter([saved]))
    found = engine.store_manifest(digest, "base:1", fetch=lambda d: b"other bytes")
    assert found.data == manifest and engine.client.image.calls == [("save", (digest,), {})]
    assert manifestcache.get(digest) == manifest
    assert containerd_engine(save=AssertionError("no save")).store_manifest(digest, "base:1").data == manifest


def test_a_save_without_the_asked_manifest_is_a_base_image_error(cache):
    saved, manifest = oci_save()
    engine = containerd_engine(save=lambda reference: iter([saved]))
    error = raised(lambda: engine.store_manifest("sha256:" + "0" * 64, "base:1", fetch=lambda d: None), BaseImageError)
    assert error.exit_code == 6 and "did not save the manifest sha256:000000000000 of base:1" in error.message
    assert "(docker-26.1-containerd)" in error.message and manifestcache.get(sha256_digest(manifest)) is None
    assert says(error.fix, "check the engine's image store") and error.fix.startswith("check")


def test_the_identity_of_an_image_is_its_id_on_the_classic_store_and_its_manifests_config_on_containerd(cache):
    _, manifest = oci_save()
    digest = manifestcache.put(manifest)
    config = json.loads(manifest)["config"]["digest"]
    classic = engine_with()
    classic._profile = EngineProfile("20.10.24", "classic", "overlay2")
    assert classic.config_digest_of({"Id": "sha256:" + "9" * 64}, "base:1") == "sha256:" + "9" * 64
    assert containerd_engine().config_digest_of({"Id": digest}, "base:1") == config


IMAGE = SimpleNamespace(id="sha256:" + "1" * 64, repo_tags=["base:1"], repo_digests=[], architecture="arm64", os="linux", variant=None,
                        root_fs=SimpleNamespace(layers=[]), config=SimpleNamespace(labels={}, env=[], entrypoint=None, cmd=None,
                                                                                   working_dir="/", user=""))


def test_identify_adds_the_config_digest_and_an_absent_image_is_none():
    engine = engine_with(inspect=IMAGE)
    engine._profile = EngineProfile("20.10.24", "classic", "overlay2")
    assert engine.identify("base:1")["ConfigDigest"] == IMAGE.id and engine.client.image.calls == [("inspect", ("base:1",), {})]
    assert engine_with(inspect=NoSuchImage(["docker"], 1, b"", b"No such image")).identify("base:1") is None


def test_a_required_image_that_is_absent_names_the_engine_and_how_to_get_it():
    engine = engine_with(inspect=NoSuchImage(["docker"], 1, b"", b"No such image"))
    engine._profile = EngineProfile("26.1.5", "containerd", "overlayfs")
    error = raised(lambda: engine.require_image("base:1"), BaseImageError)
    assert error.exit_code == 6 and f"image base:1 is not present on {HOST} (docker-26.1-containerd" in error.message
    assert error.fix.startswith("load or pull it yourself (docker pull base:1)")
    assert engine_with(inspect=IMAGE).require_image("base:1")["Id"] == IMAGE.id


def test_a_created_container_is_never_started_has_no_network_and_is_removed_even_after_a_failure(monkeypatch):
    monkeypatch.setattr(module.os, "getpid", lambda: 4242)
    engine = engine_with(inspect=IMAGE)
    with pytest.raises(RuntimeError):
        with engine.created_container("base:1") as name:
            assert name.startswith("kvbake-extract-") and len(name) == len("kvbake-extract-") + 12
            raise RuntimeError("the caller failed")
    assert engine.client.container.calls == [
        ("create", ("base:1", ["true"]), {"name": name, "networks": ["none"], "pull": "never", "mounts": [],
                                          "labels": {"org.kvbake.extract.pid": "4242"}}),
        ("remove", (name,), {"force": True})]


def test_a_created_container_may_hold_one_folder_of_the_engine_s_host_read_only(monkeypatch):
    monkeypatch.setattr(module.os, "getpid", lambda: 4242)
    engine = engine_with(inspect=IMAGE)
    with engine.created_container("base:1", ("/var/lib/docker/image/overlay2/imagedb/content/sha256", "/kvbake-store")):
        pass
    (_, _, options), _ = engine.client.container.calls
    assert options["mounts"] == [["type=bind", "source=/var/lib/docker/image/overlay2/imagedb/content/sha256",
                                  "target=/kvbake-store", "readonly"]] and options["networks"] == ["none"]


def test_a_container_that_cannot_be_created_is_an_engine_error_and_a_failed_removal_is_ignored():
    error = raised(lambda: engine_with(inspect=IMAGE, create=refusal("no space")).created_container("base:1").__enter__())
    assert HOST in error.message and "cannot create a container from base:1 (no space)" in error.message
    assert error.fix.startswith("check the engine and the image")
    for gone in (refusal("device busy"), NoSuchContainer(["docker"], 1, b"", b"gone")):
        with engine_with(inspect=IMAGE, remove=gone).created_container("base:1") as name:
            assert name.startswith("kvbake-extract-")


def test_copying_out_keeps_owners_and_a_missing_path_is_false(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(module, "run_cli", lambda argv: seen.append(argv))
    assert engine_with().copy_out("c1", "/src/a.py", tmp_path / "a.py") is True
    assert seen == [["docker", "--host", "h", "container", "cp", "--archive", "c1:/src/a.py", str(tmp_path / "a.py")]]
    for missing in ("Error: Could not find the file /src/a.py in container c1", "Error: No such container:path: c1:/src/a.py"):
        monkeypatch.setattr(module, "run_cli", lambda argv, text=missing: (_ for _ in ()).throw(refusal(text)))
        assert engine_with().copy_out("c1", "/src/a.py", tmp_path) is False
    monkeypatch.setattr(module, "run_cli", lambda argv: (_ for _ in ()).throw(refusal("permission denied")))
    error = raised(lambda: engine_with().copy_out("c1", "/x", tmp_path))
    assert HOST in error.message and "copying /x out failed (permission denied)" in error.message and says(error.fix, "check the engine")


def test_save_load_and_tag_pass_their_arguments_and_name_the_call_that_failed(tmp_path):
    engine = engine_with(save="stream")
    assert engine.save_stream("base:1") == "stream"
    engine.load(tmp_path / "thin.tar")
    engine.tag("sha256:1", "repo:tag")
    assert engine.client.image.calls == [("save", ("base:1",), {}), ("load", (tmp_path / "thin.tar",), {"quiet": True}),
                                         ("tag", ("sha256:1", "repo:tag"), {})]
    broken = engine_with(save=refusal("x"), load=refusal("y"), tag=refusal("z"))
    for call, words, fix in ((lambda: broken.save_stream("base:1"), "save base:1 failed (x)", "check the engine"),
                             (lambda: broken.load(tmp_path), "load of the thin archive failed (y)", "check that the base image is present"),
                             (lambda: broken.tag("i", "repo:tag"), "tag repo:tag failed (z)", "check the engine")):
        error = raised(call)
        assert HOST in error.message and words in error.message and says(error.fix, fix) and error.fix.startswith(fix[:5])


@pytest.fixture()
def progress(monkeypatch):
    monkeypatch.setitem(terminal._SHOWN, "console", None)


def docker_lines(reference):
    """What python-on-whales yields for a streamed pull or push: (reference, line) pairs (a quiet call drops them)."""
    return iter([(reference, b"abc: Pulling fs layer\n"), (reference, b"Status: Downloaded newer image for r:2\n")])


def test_pull_and_push_are_quiet_unless_progress_is_shown_and_then_docker_s_lines_are_the_detail(progress):
    engine = engine_with(pull=docker_lines, push=docker_lines)
    engine.pull("r:1")
    engine.push("r:1")
    screen = io.StringIO()
    terminal.show_on(Console(file=screen, force_terminal=True, width=160))
    engine.pull("r:2")
    engine.push("r:2")
    assert engine.client.image.calls == [("pull", ("r:1",), {"quiet": True}), ("push", ("r:1",), {"quiet": True}),
                                         ("pull", ("r:2",), {"stream_logs": True}), ("push", ("r:2",), {"stream_logs": True})]
    drawn = screen.getvalue()
    assert f"pull r:2 on {HOST}" in drawn and "push r:2" in drawn and "0:00:00" in drawn and "done" in drawn
    assert "pull r:1" not in drawn, "a quiet pull draws nothing"


def test_a_failed_pull_is_an_engine_error_and_a_failed_push_a_registry_error(progress):
    error = raised(lambda: engine_with(pull=refusal("denied")).pull("r:1"))
    assert "pull r:1 failed (denied)" in error.message and says(error.fix, "up and reachable")
    error = raised(lambda: engine_with(push=refusal("unauthorized")).push("r:1"), RegistryError)
    assert error.exit_code == 11 and HOST in error.message and "push of r:1 failed (unauthorized)" in error.message
    assert error.fix.startswith("check that the registry is up") and "(docker login)" in error.fix
    assert says(error.fix, "blobs already uploaded are skipped")


def test_the_image_id_of_a_reference_or_none_when_absent():
    engine = engine_with(inspect=IMAGE)
    assert engine.image_id_of("base:1") == IMAGE.id and engine.client.image.calls == [("inspect", ("base:1",), {})]
    assert engine_with(inspect=NoSuchImage(["docker"], 1, b"", b"No such image")).image_id_of("base:1") is None
    assert "inspect base:1 failed (timeout)" in raised(lambda: engine_with(inspect=refusal("timeout")).image_id_of("base:1")).message


def test_removing_an_image_prunes_and_never_fails_and_untagging_keeps_the_image():
    engine = engine_with()
    engine.remove_image("a:1")
    engine.untag("b:1")
    assert engine.client.image.calls == [("remove", ("a:1",), {"force": False, "prune": True}),
                                         ("remove", ("b:1",), {"force": False, "prune": False})]
    engine_with(remove=refusal("image is in use")).remove_image("a:1")
    engine_with(remove=NoSuchImage(["docker"], 1, b"", b"x")).remove_image("a:1")


def test_a_tag_that_is_already_gone_is_untagged_and_any_other_refusal_is_an_error():
    engine_with(remove=NoSuchImage(["docker"], 1, b"", b"x")).untag("b:1")
    engine_with(remove=refusal("Error: No such image: b:1")).untag("b:1")
    assert "untag b:1 failed (conflict: in use)" in raised(lambda: engine_with(remove=refusal("conflict: in use")).untag("b:1")).message


def test_the_login_store_folder_is_the_clients_config_or_none():
    assert engine_with(config=Path("/home/op/.kvbake/docker")).config_dir() == "/home/op/.kvbake/docker"
    assert engine_with(config=None).config_dir() is None


def test_the_legacy_build_keeps_buildkit_off_and_the_network_and_cache_out(monkeypatch, tmp_path):
    made = []

    class Classic:
        def __init__(self, **kwargs):
            made.append(kwargs)

        def legacy_build(self, *args, **kwargs):
            made.append((args, kwargs))
            return SimpleNamespace(id="sha256:built")

    monkeypatch.setattr(module, "DockerClient", Classic)
    engine = engine_with(config=Path("/cfg"))
    assert engine.legacy_build(tmp_path, tmp_path / "Dockerfile", "x:1") == "sha256:built"
    assert made == [{"host": HOST, "config": Path("/cfg"), "client_call": ["env", "DOCKER_BUILDKIT=0", "docker"]},
                    ((tmp_path,), {"file": tmp_path / "Dockerfile", "tags": ["x:1"], "network": "none", "pull": False, "cache": False})]
    monkeypatch.setattr(Classic, "legacy_build", lambda self, *a, **k: (_ for _ in ()).throw(refusal("step 3 failed")))
    error = raised(lambda: engine.legacy_build(tmp_path, tmp_path / "Dockerfile", "x:1"))
    assert HOST in error.message and "docker build failed (step 3 failed)" in error.message and says(error.fix, "output with --debug")


def test_python_runs_as_root_without_network_and_an_image_without_python_is_none():
    engine = engine_with(run="3.12\n")
    assert engine.run_python("img", "print(1)") == "3.12\n"
    assert engine.client.top.calls == [("run", ("img", ["-c", "print(1)"]), {"entrypoint": "python3", "networks": ["none"], "remove": True,
                                                                             "user": "0", "pull": "never"})]
    for code in (126, 127):
        assert engine_with(run=DockerException(["docker", "run"], code, b"", b"exec failed")).run_python("img", "x") is None
    error = raised(lambda: engine_with(run=DockerException(["docker", "run"], 1, b"", b"Traceback\nboom")).run_python("img", "x"))
    assert HOST in error.message and "running python3 in img failed (boom)" in error.message and says(error.fix, "the image has python3")


def test_a_manifest_the_store_holds_is_remembered_under_its_digest(cache):
    assert engine_with().remember_manifest(b'{"schemaVersion": 2}') == sha256_digest(b'{"schemaVersion": 2}')
    assert manifestcache.get(sha256_digest(b'{"schemaVersion": 2}')) == b'{"schemaVersion": 2}'


def test_the_identity_on_the_containerd_store_names_the_reference_when_its_manifest_cannot_be_read(cache):
    saved, _ = oci_save()
    engine = containerd_engine(inspect=SimpleNamespace(**{**vars(IMAGE), "id": "sha256:" + "0" * 64}), save=lambda reference: iter([saved]))
    error = raised(lambda: engine.identify("base:1"), BaseImageError)
    assert says(error.message, "of base:1")


def test_an_unset_working_dir_reads_as_empty_and_an_absent_required_image_is_asked_by_its_reference():
    bare = SimpleNamespace(**{**vars(IMAGE), "config": SimpleNamespace(**{**vars(IMAGE.config), "working_dir": None})})
    assert engine_with(inspect=bare).inspect_image("base:1")["Config"]["WorkingDir"] == ""
    engine = engine_with(inspect=IMAGE)
    engine.require_image("base:1")
    assert engine.client.image.calls == [("inspect", ("base:1",), {})]
    error = raised(lambda: engine_with(inspect=refusal("denied")).inspect_image("base:1"))
    assert says(error.fix, "check the engine")


def test_an_old_engine_is_named_by_its_label_and_a_reason_is_kept_whole_without_a_host():
    old = engine_with(info=SimpleNamespace(**{**vars(INFO), "server_version": "19.03.1"}))
    assert says(raised(old.ping).message, f"{HOST} runs Docker 19.03.1")
    local = engine_with(host=None, info=refusal("dial unix: connect at None: refused"))
    assert says(raised(local.ping).message, "(dial unix: connect at None: refused)")


def test_reading_a_manifest_from_docker_save_is_logged_and_a_broken_save_names_the_reference(cache, caplog):
    saved, manifest = oci_save()
    digest = sha256_digest(manifest)
    with caplog.at_level("INFO", logger="kvbake.engines.adapters.client"):
        containerd_engine(save=lambda reference: iter([saved])).store_manifest(digest, "base:1")
    assert any(says(record.getMessage(), "reading the manifest of base:1 from docker save (once; cached afterwards)") for record in caplog.records)
    broken = containerd_engine(save=lambda reference: iter([saved[: len(saved) // 2]]))
    assert says(raised(lambda: broken.store_manifest("sha256:" + "1" * 64, "base:2"), BaseImageError).message, "of base:2")


def test_the_containerd_identity_uses_the_given_fetch_and_names_the_reference(cache):
    _, manifest = oci_save()
    digest = sha256_digest(manifest)
    engine = containerd_engine(save=AssertionError("no save"))
    assert engine.config_digest_of({"Id": digest}, "base:1", fetch=lambda d: manifest) == json.loads(manifest)["config"]["digest"]
    saved, _ = oci_save()
    failing = containerd_engine(save=lambda reference: iter([saved]))
    error = raised(lambda: failing.config_digest_of({"Id": "sha256:" + "0" * 64}, "base:3", fetch=lambda d: None), BaseImageError)
    assert says(error.message, "of base:3")


def test_a_cached_entry_that_is_no_manifest_names_the_reference(cache):
    digest = manifestcache.put(b"[]")
    assert says(raised(lambda: containerd_engine().store_manifest(digest, "base:9"), BaseImageError).message, "of base:9")
