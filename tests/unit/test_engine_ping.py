"""An engine that does not answer is unreachable, whichever docker CLI reports it (exit code, or an info without server)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from python_on_whales.exceptions import DockerException

from kvbake.engines.adapters.client import Engine
from kvbake.errors import EngineError

DOWN = "Cannot connect to the Docker daemon at unix:///run/node.sock. Is the docker daemon running?"


def failing(*_args, **_kwargs):
    raise DockerException(["docker", "version"], 1, b"", DOWN.encode())


def engine_whose_info_is(info: SimpleNamespace, version=failing) -> Engine:
    engine = Engine("unix:///run/node.sock")
    engine.client = SimpleNamespace(system=SimpleNamespace(info=lambda: info), version=version)
    return engine


def test_an_info_without_server_is_unreachable_with_the_clis_reason() -> None:
    """docker-cli 26 exits 0 from `info` with an empty server part when the engine is down."""
    with pytest.raises(EngineError) as failure:
        engine_whose_info_is(SimpleNamespace(server_version="")).ping()
    assert failure.value.message.startswith("unix:///run/node.sock ") and "Cannot connect to the Docker daemon" in failure.value.message
    assert failure.value.exit_code == 8


def test_an_info_without_server_is_unreachable_even_when_version_answers() -> None:
    with pytest.raises(EngineError) as failure:
        engine_whose_info_is(SimpleNamespace(server_version=""), version=lambda: None).ping()
    assert failure.value.exit_code == 8
    assert all(field in failure.value.message for field in ("unix:///run/node.sock", "unreachable", "names no server"))
    assert "Docker service" in failure.value.fix


def test_an_unreachable_engine_never_points_an_operator_to_the_developers_set_up() -> None:
    with pytest.raises(EngineError) as failure:
        engine_whose_info_is(SimpleNamespace(server_version="")).ping()
    fix = failure.value.fix
    assert "DOCKER_HOST" in fix and "--host" in fix
    assert "dockerd" not in fix and "README" not in fix and "Two commands" not in fix


@pytest.mark.parametrize("host", ["unix:///run/node.sock", "ssh://ops@spark-a"])
def test_an_unreachable_node_names_its_host_once(host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbake.errors import RolloutError
    from kvbake.ship.adapters import fleet

    def down(*_args, **_kwargs):
        raise DockerException(["docker", "info"], 1, b"", f"Cannot connect to the Docker daemon at {host}. Is the docker daemon running?".encode())

    def engine(given: str) -> Engine:
        found = Engine(given)
        found.client = SimpleNamespace(system=SimpleNamespace(info=down), version=down)
        return found

    monkeypatch.setattr(fleet, "Engine", engine)
    deployment = SimpleNamespace(nodes=[SimpleNamespace(name="spark-a", host=host)])
    with pytest.raises(RolloutError) as failure:
        fleet.connect(deployment)
    line = failure.value.one_line()
    assert line.count(host) == 1, line
    assert line.startswith(f"node spark-a: {host} is unreachable (Cannot connect to the Docker daemon. Is the docker daemon running?)"), line
    assert failure.value.exit_code == 12


def test_an_info_that_fails_is_unreachable() -> None:
    engine = engine_whose_info_is(SimpleNamespace())
    engine.client.system.info = failing
    with pytest.raises(EngineError) as failure:
        engine.ping()
    assert failure.value.exit_code == 8
    assert all(field in failure.value.message for field in ("unix:///run/node.sock", "unreachable", "Cannot connect to the Docker daemon"))


def test_a_current_engine_answers_with_its_profile() -> None:
    info = SimpleNamespace(server_version="26.1.5+dfsg1", driver="overlay2", driver_status=[["Backing Filesystem", "extfs"]],
                           architecture="x86_64", os_type="linux")
    assert engine_whose_info_is(info).ping()["profile"] == "docker-26.1-classic"
