"""Identity by config digest at every step: --image by digest only, verify-running by each store's config digest and
the image's runtime config, --expect on an adopted serve, a mount over the working directory, and untag's errors."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from python_on_whales.exceptions import DockerException, NoSuchImage

from kvbake.cli import main
from kvbake.engines.adapters.client import Engine
from kvbake.errors import EngineError, UsageError
from kvbake.ship.adapters.node_identity import config_digest_on
from kvbake.ship.core.push_record import check_digest_reference
from kvbake.ship.core.release import Release, runtime_config
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.running import workdir_failures

from fake_fleet import CONTROL, CONTAINER, PACKING, REPO, World, deploy, make_world

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("image", [f"{REPO}@{DIGEST}", f"registry.lan:5000/team/x@{DIGEST}"])
def test_a_digest_reference_is_accepted(image):
    assert check_digest_reference(image) == image


@pytest.mark.parametrize("image", [f"{REPO}:current", f"{REPO}:v1@{DIGEST[:-1]}", f"{REPO}@sha256:{'AB' * 32}", DIGEST, f"{REPO}@{DIGEST} "])
def test_an_image_by_tag_or_a_malformed_digest_is_a_usage_error(image):
    with pytest.raises(UsageError) as refused:
        check_digest_reference(image)
    assert refused.value.exit_code == 2 and "is not a digest reference" in refused.value.message and "push" in refused.value.fix


def test_deploy_refuses_image_by_tag_before_it_reads_anything(tmp_path, capsys):
    """The deployment file does not exist: a command that read it first would fail with exit 3, not 2."""
    code = main(["deploy", "--preset", "control", "--image", f"{REPO}:current", "--deploy", str(tmp_path / "absent.yaml"),
                 "--manifest", str(tmp_path / "absent-manifest.yaml")])
    assert code == 2 and "--image 'reg:5000/kvbake/x:current' is not a digest reference" in capsys.readouterr().err


@pytest.fixture()
def containerd_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch, "containerd")


def running_image(world: World, node: str) -> tuple[dict, dict]:
    engine = world.engines[node]
    container = engine.containers[CONTAINER]
    return container, engine.images[container["Image"]]


def test_verify_reads_the_running_images_config_digest_on_the_containerd_store(containerd_world):
    """Same Id (the pulled manifest's digest), same layers and labels, but the manifest names another config: only the
    config digest tells, and verify names it."""
    world = containerd_world
    deploy(world, PACKING)
    container, image = running_image(world, "b")
    assert world.fleet.rank_failures("b", container, image, PACKING) == []
    world.engines["b"].configs[image["Id"]] = "sha256:" + "0" * 64
    assert world.fleet.rank_failures("b", container, image, PACKING) == [
        f"b: the running image's config is sha256:000000000000, not the release's {PACKING.config_digest[:19]}"]


@pytest.mark.parametrize("store", ["classic", "containerd"])
def test_a_deployed_rank_is_known_by_its_config_digest_on_either_store(tmp_path, monkeypatch, store):
    """The classic store's image Id is the config digest; the containerd store's is the digest of the manifest the pull
    reference names, which is not the config's: each rank runs the Id its store gives, and on both stores kvbake's
    identity of it is the release's config digest, so verify passes."""
    world = make_world(tmp_path, monkeypatch, store)
    deploy(world, PACKING)
    manifest_digest = PACKING.image.partition("@")[2]
    assert manifest_digest != PACKING.config_digest
    for node, engine in world.engines.items():
        container, image = running_image(world, node)
        assert container["Image"] == (PACKING.config_digest if store == "classic" else manifest_digest)
        assert config_digest_on(engine, image, REPO) == PACKING.config_digest
        assert world.fleet.expected_id(node, PACKING)[0] == container["Image"]
        assert world.fleet.check_rank(node, PACKING).failures == ()


@pytest.mark.parametrize("key, value", [("Env", ["PYTHONPATH=/opt/shadow"]), ("WorkingDir", "/opt/shadow"), ("Entrypoint", ["sh"]),
                                        ("Cmd", ["-c", "x"])])
def test_verify_compares_the_images_env_workdir_entrypoint_and_cmd(tmp_path, monkeypatch, key, value):
    world = make_world(tmp_path, monkeypatch)
    deploy(world, PACKING)
    container, image = running_image(world, "a")
    image["Config"][key] = value
    failures = world.fleet.rank_failures("a", container, image, PACKING)
    assert failures == [f"a: the running image's {key} is {runtime_config(image['Config'])[key]!r}, not the release's "
                        f"{PACKING.image_config[key]!r}"]


def test_an_earlier_record_without_the_runtime_config_is_not_held_to_it(tmp_path, monkeypatch):
    world = make_world(tmp_path, monkeypatch)
    deploy(world, PACKING)
    container, image = running_image(world, "a")
    image["Config"]["WorkingDir"] = "/elsewhere"
    old = Release(**{**PACKING.__dict__, "image_config": None})
    assert world.fleet.rank_failures("a", container, image, old) == []


def test_verify_running_expect_applies_to_an_adopted_serve(tmp_path, monkeypatch):
    world = make_world(tmp_path, monkeypatch)
    world.engines["a"].run_serving(CONTAINER, "base:1", ["S=3"])
    container = world.engines["a"].containers[CONTAINER]
    adopted = Release(**{**CONTROL.__dict__, "switches": {"S": "3"}, "layers": ("sha256:base",),
                         "adopted": {"container_id": container["Id"], "kept_as": "serve-kept", "image_id": "sha256:base"}})
    image = world.engines["a"].images["sha256:base"]
    world.engines["a"].tags[f"{REPO}:current"] = "sha256:base"
    NodeState("a", world.engines["a"]).update("base:1", "seeded", current=adopted)
    assert world.fleet.check_rank("a", adopted).failures == ()
    assert world.fleet.check_rank("a", adopted, {}).failures == ("a: pid 1: switch S is 3, expected unset",)
    assert world.fleet.check_rank("a", adopted, {"S": "3"}).failures == ()


@pytest.mark.parametrize("workdir, destination, shown", [
    ("/srv/app", "/srv/app", "/srv/app"), ("/srv/app", "/srv", "/srv"), ("/srv/app", "/", "/"), ("/srv/app/", "/srv/", "/srv"),
    ("/srv/app", "/srv/app/cache", None), ("/srv/app", "/models", None), ("/srv/app", "/srv/X", None), ("/srv/appX", "/srv/app", None),
    ("", "/models", None), ("/", "/models", None)])
def test_a_mount_that_holds_the_working_directory_is_named(workdir, destination, shown):
    container = {"Config": {"WorkingDir": workdir}, "Mounts": [{"Type": "bind", "Destination": destination}]}
    expected = [] if shown is None else [f"a bind mount at {shown} holds the working directory {workdir.rstrip('/')}, which python -m "
                                         "searches before the baked sources"]
    assert workdir_failures(container) == expected


@pytest.mark.parametrize("workdir, destination, flagged", [
    ("/srv/app", "/srv/app/vllm", True), ("/srv/app", "/srv/app/vllm.py", True), ("", "/vllm", True), ("/", "/vllm/", True),
    ("/srv/app", "/srv/app/vllm/model_executor", False), ("/srv/app", "/srv/app/vllmx", False), ("/srv/app", "/vllm", False)])
def test_a_mount_that_puts_a_vllm_in_the_working_directory_is_named(workdir, destination, flagged):
    container = {"Config": {"WorkingDir": workdir}, "Mounts": [{"Type": "volume", "Destination": destination}]}
    failures = workdir_failures(container)
    assert len(failures) == flagged
    if flagged:
        assert failures[0].startswith(f"a volume mount at {destination.rstrip('/')} puts a vllm in the working directory {workdir or '/'},")


class RefusingImages:
    """python-on-whales' image calls, refusing a removal the way the engine does."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def remove(self, reference, force=False, prune=True):
        raise self.error


def engine_refusing(error: Exception) -> Engine:
    engine = Engine.__new__(Engine)
    engine.host, engine.label = "unix:///node.sock", "unix:///node.sock"
    engine.client = SimpleNamespace(image=RefusingImages(error))
    return engine


def test_untag_of_a_tag_already_gone_is_fine_and_any_other_refusal_is_an_engine_error():
    engine_refusing(NoSuchImage(["docker", "image", "rm", "x"], 1, b"", b"Error: No such image: x")).untag("x")
    engine_refusing(DockerException(["docker", "image", "rm", "x"], 1, b"", b"Error response from daemon: No such image: x")).untag("x")
    conflict = DockerException(["docker", "image", "rm", "x"], 1, b"", b"Error response from daemon: conflict: unable to remove repository "
                               b"reference \"x\" (must force) - container 0123 is using its referenced image")
    with pytest.raises(EngineError) as refused:
        engine_refusing(conflict).untag("x")
    assert refused.value.exit_code == 8 and "untag x failed (Error response from daemon: conflict" in refused.value.message
