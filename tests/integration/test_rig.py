"""The local rig end to end: a real registry, two node engines (one behind ssh) and a TLS+auth registry."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from kvbake_rig import (
    Credentials,
    LocalRegistry,
    LoopbackSshd,
    NodeEngine,
    RegistryEndpoint,
    login,
    prepare_ssh_client,
    private_client,
    write_htpasswd,
)
from kvbake_rig.mounts import mounts_below
from kvbake_rig.processes import ProcessRef

pytestmark = pytest.mark.docker

REPO_ROOT = Path(__file__).resolve().parents[2]
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class Node:
    """A node as the tests see it: its engine, and the client that reaches it (unix or ssh)."""

    engine: NodeEngine
    client: DockerClient


@pytest.fixture(scope="module")
def main_engine() -> DockerClient:
    client = DockerClient()
    client.info()  # a missing engine fails the run; it is never a skip
    return client


@pytest.fixture(scope="module")
def tiny_image(main_engine: DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A file-only image imported from a tar made here; removed again at the end."""
    archive = tmp_path_factory.mktemp("image") / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        for name, text in (("etc/kvbake-rig.txt", "rig\n"), ("srv/payload.bin", "x" * 4096)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(text), 1_700_000_000
            tar.addfile(info, io.BytesIO(text.encode()))
    tag = f"kvbake-rig-test:{uuid.uuid4().hex[:12]}"
    image = main_engine.import_(str(archive), tag=tag)
    yield tag
    main_engine.image.remove(image.id, force=True)


@pytest.fixture(scope="module")
def plain_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    with LocalRegistry(tmp_path_factory.mktemp("plain-registry")) as running:
        yield running


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, Node, LoopbackSshd]]:
    """Node A on its unix socket, node B only through ssh://root@127.0.0.1:PORT."""
    root = tmp_path_factory.mktemp("nodes")
    ssh_client = prepare_ssh_client(root / "ssh-client")
    with NodeEngine(root / "a", name="a") as engine_a, NodeEngine(root / "b", name="b") as engine_b:
        with LoopbackSshd(root / "sshd-b", ssh_client, engine_b.host) as gateway:
            node_b = Node(engine_b, ssh_client.docker_client(gateway.ssh_host(), root / "config-b"))
            yield Node(engine_a, engine_a.client(root / "config-a")), node_b, gateway


def manifest_digest(endpoint: RegistryEndpoint, repository: str, tag: str, auth: Credentials | None = None) -> str:
    """Read the manifest digest back from the registry itself."""
    basic = (auth.username, auth.password) if auth else None
    with endpoint.http_client() as http:
        reply = http.get(f"/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFEST_V2}, auth=basic)
    reply.raise_for_status()
    return reply.headers["Docker-Content-Digest"]


def push_tiny(main_engine: DockerClient, client: DockerClient, tiny: str, address: str) -> tuple[str, str]:
    """Tag the tiny image for `address`, push it with `client`, return (repository, tag)."""
    repository, tag = "rig/tiny", uuid.uuid4().hex[:8]
    main_engine.tag(tiny, f"{address}/{repository}:{tag}")
    client.push(f"{address}/{repository}:{tag}", quiet=True)
    return repository, tag


@pytest.fixture(scope="module")
def pulled(
    main_engine: DockerClient,
    tiny_image: str,
    plain_registry: LocalRegistry,
    nodes: tuple[Node, Node, LoopbackSshd],
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    """Push once, pull by digest on both nodes; return the digest reference."""
    pusher = private_client(tmp_path_factory.mktemp("pusher-config"))
    repository, tag = push_tiny(main_engine, pusher, tiny_image, plain_registry.address)
    digest = manifest_digest(plain_registry.endpoint, repository, tag)
    reference = f"{plain_registry.address}/{repository}@{digest}"
    for node in nodes[:2]:
        node.client.pull(reference, quiet=True)
    main_engine.image.remove(f"{plain_registry.address}/{repository}:{tag}")
    return reference


def test_both_nodes_hold_the_same_layers(
    main_engine: DockerClient, tiny_image: str, pulled: str, nodes: tuple[Node, Node, LoopbackSshd]
) -> None:
    node_a, node_b, _ = nodes
    layers_a = node_a.client.image.inspect(pulled).root_fs.layers
    layers_b = node_b.client.image.inspect(pulled).root_fs.layers
    assert layers_a == layers_b == main_engine.image.inspect(tiny_image).root_fs.layers
    assert node_b.client.info().docker_root_dir == node_b.engine.root / "data"
    assert node_a.client.info().docker_root_dir != node_b.client.info().docker_root_dir


def answers(client: DockerClient) -> bool:
    """True when the engine behind the client answers `docker info` with a server: docker-cli 28 fails when it does
    not, docker-cli 26 (Debian 13) exits 0 without the server part."""
    try:
        return bool(client.info().server_version)
    except DockerException:
        return False


def test_node_goes_down_and_comes_back_with_its_images(pulled: str, nodes: tuple[Node, Node, LoopbackSshd]) -> None:
    _, node_b, _ = nodes
    stop_seconds = node_b.engine.stop()
    assert not answers(node_b.client) and not answers(node_b.engine.client())
    start_seconds = node_b.engine.start()
    assert node_b.client.image.inspect(pulled).repo_digests == [pulled]
    print(f"node engine stop {stop_seconds:.2f}s, start {start_seconds:.2f}s")


def test_tls_auth_registry_needs_a_login(
    main_engine: DockerClient, tiny_image: str, nodes: tuple[Node, Node, LoopbackSshd], tmp_path: Path
) -> None:
    credentials = Credentials.generate("rig-user")
    htpasswd = write_htpasswd(tmp_path / "auth" / "htpasswd", credentials)
    config_dir = tmp_path / "docker-config"
    pusher = private_client(config_dir)
    with LocalRegistry(tmp_path / "registry", tls=True, htpasswd=htpasswd, username="rig-user") as secured:
        endpoint = secured.endpoint
        assert endpoint is not None and endpoint.url.startswith("https://127.0.0.1:")
        assert (Path("/etc/docker/certs.d") / secured.address / "ca.crt").read_bytes() == endpoint.ca_path.read_bytes()
        with endpoint.http_client() as http:
            assert http.get("/v2/").status_code == 401
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{endpoint.url}/v2/", trust_env=False)

        with pytest.raises(DockerException) as refused:
            push_tiny(main_engine, pusher, tiny_image, secured.address)
        assert "no basic auth credentials" in (refused.value.stderr or "")

        login(pusher, secured.address, credentials)
        repository, tag = push_tiny(main_engine, pusher, tiny_image, secured.address)
        digest = manifest_digest(endpoint, repository, tag, auth=credentials)
        _, node_b, gateway = nodes
        puller = gateway.client.docker_client(gateway.ssh_host(), config_dir)
        puller.pull(f"{secured.address}/{repository}@{digest}", quiet=True)
        main_engine.image.remove(f"{secured.address}/{repository}:{tag}")
        trust_dir = Path("/etc/docker/certs.d") / secured.address
    assert not trust_dir.exists()
    assert_password_only_in_login_store(credentials, [tmp_path, node_b.engine.root, gateway.root], config_dir, htpasswd)


def assert_password_only_in_login_store(
    credentials: Credentials, folders: list[Path], config_dir: Path, htpasswd: Path
) -> None:
    """The password is nowhere in clear; its basic-auth form only in the login store; htpasswd holds a bcrypt hash."""
    secret = credentials.password.encode()
    basic = base64.b64encode(f"{credentials.username}:{credentials.password}".encode())
    holders = []
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                assert secret not in data, f"password in clear in {path}"
                if basic in data:
                    holders.append(path)
    assert holders == [config_dir / "config.json"]
    auths = json.loads((config_dir / "config.json").read_text())["auths"]
    assert [entry["auth"] for entry in auths.values()] == [basic.decode()]
    assert htpasswd.read_text().startswith(f"{credentials.username}:$2y$")


def test_rig_leaves_nothing_behind(tmp_path: Path) -> None:
    ssh_client = prepare_ssh_client(tmp_path / "ssh-client")
    with LocalRegistry(tmp_path / "registry", tls=True) as secured, NodeEngine(tmp_path / "node", name="n") as engine:
        with LoopbackSshd(tmp_path / "sshd", ssh_client, engine.host) as gateway:
            ssh_client.docker_client(gateway.ssh_host()).image.list()
            refs = [secured.daemon.ref, engine.daemon.ref, gateway.daemon.ref]
            runtime, trust_dir = engine.runtime, Path("/etc/docker/certs.d") / secured.address
    assert not any(ref.alive() for ref in refs)
    assert not runtime.exists() and not engine.root.exists() and not trust_dir.exists()
    assert mounts_below(tmp_path) == [] and mounts_below(runtime) == []
    assert ssh_client.known_hosts.read_text() == ""


def test_cli_up_env_down(tmp_path: Path) -> None:
    rig_dir = tmp_path / "rig"
    script = [sys.executable, str(REPO_ROOT / "scripts" / "rig.py")]
    began = time.monotonic()
    up = subprocess.run([*script, "up", "--dir", str(rig_dir), "--tls", "--auth"], capture_output=True, text=True)
    assert up.returncode == 0, up.stderr
    state = json.loads(up.stdout)
    assert state == json.loads((rig_dir / "state.json").read_text())
    up_seconds = time.monotonic() - began
    try:
        env = subprocess.run([*script, "env", "--dir", str(rig_dir)], capture_output=True, text=True, check=True).stdout
        assert f"export KVBAKE_RIG_NODE_B=ssh://root@127.0.0.1:{state['nodes'][1]['ssh']['port']}" in env
        assert "DOCKER_CONFIG=" in env and state["registry"]["scheme"] == "https"
        files = prepare_ssh_client(Path(state["ssh_client"]))
        node_b = files.docker_client(state["nodes"][1]["host"])
        assert node_b.info().docker_root_dir == rig_dir / "nodes" / "node-b" / "data"
    finally:
        down = subprocess.run([*script, "down", "--dir", str(rig_dir)], capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    refs = [ProcessRef.from_json(state["registry"]["process"])]
    refs += [ProcessRef.from_json(node["engine"]["process"]) for node in state["nodes"]]
    assert not any(ref.alive() for ref in refs)
    assert not rig_dir.exists() and not Path(state["registry"]["engine_trust_dir"]).exists()
    print(f"rig up (registry + 2 nodes + sshd) {up_seconds:.2f}s")
