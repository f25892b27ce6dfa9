"""doctor's registry, node and first-failure lines: the registry over recorded HTTP replies (no network), nodes over fake engines."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from kvbake.errors import BaseImageError, EngineError, RegistryError, RolloutError
from kvbake.manifest import load_manifest
from kvbake.operate.adapters import doctor
from kvbake.operate.adapters.doctor import FAIL, OK, Check, diagnose, first_failure, registry_line
from kvbake.operate.adapters.memwatch import GIB
from kvbake.registry.adapters.registry_api import RegistryClient

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"


class LoginStoreEngine:
    """The local engine as registry_line uses it: only the folder of its login store."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def config_dir(self) -> str:
        return str(self.folder)


def login_store(folder: Path, registry: str | None) -> LoginStoreEngine:
    """A docker config.json with a login for `registry` (none when it is None)."""
    folder.mkdir(parents=True, exist_ok=True)
    auths = {} if registry is None else {registry: {"auth": base64.b64encode(b"ops:s3cret").decode()}}
    (folder / "config.json").write_text(json.dumps({"auths": auths}))
    return LoginStoreEngine(folder)


BASIC = "Basic " + base64.b64encode(b"ops:s3cret").decode()


def recorded_registry(monkeypatch: pytest.MonkeyPatch, tags: list[str] | None, https: bool = True,
                      login: bool = False) -> list[httpx.Request]:
    """The registry client of doctor answers from this handler: /v2/ and the tags list (404 when `tags` is None);
    without `https` the TLS attempt fails to connect, as a plain-HTTP loopback registry does; with `login` the tags
    need the stored login."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.scheme == "https" and not https:
            raise httpx.ConnectError("TLS handshake refused", request=request)
        if request.url.path == "/v2/":
            return httpx.Response(200)
        if login and request.headers.get("Authorization") != BASIC:
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
        if request.url.path.endswith("/tags/list") and tags is not None:
            return httpx.Response(200, json={"name": "x", "tags": tags})
        return httpx.Response(404)

    def client(registry: str, auth: Any) -> RegistryClient:
        return RegistryClient(registry, auth, certs_root=Path("/nonexistent"), transport=httpx.MockTransport(handler))

    monkeypatch.setattr(doctor, "RegistryClient", client)
    return seen


@pytest.fixture(scope="module")
def standin():
    return load_manifest(STANDIN)


def test_a_tls_registry_with_a_login_names_the_user_and_counts_the_tags(standin, tmp_path, monkeypatch) -> None:
    host, name = standin.output.repository.split("/", 1)
    seen = recorded_registry(monkeypatch, ["a", "b", "c"], login=True)
    line = registry_line(login_store(tmp_path, host), standin, None)
    assert line == f"{host} over TLS, logged in as ops, {name}: 3 tags"
    assert any(r.url.path == f"/v2/{name}/tags/list" for r in seen)


def test_a_plain_http_loopback_registry_without_a_login_is_said_so(standin, tmp_path, monkeypatch) -> None:
    recorded_registry(monkeypatch, None, https=False)
    line = registry_line(login_store(tmp_path, None), standin, "127.0.0.1:5999")
    name = standin.output.repository.split("/", 1)[1]
    assert line == f"127.0.0.1:5999 over plain HTTP (loopback only), no login stored (anonymous), {name}: 0 tags"


def test_the_registry_given_replaces_the_repositorys_host(standin, tmp_path, monkeypatch) -> None:
    seen = recorded_registry(monkeypatch, ["x"])
    registry_line(login_store(tmp_path, "127.0.0.1:6000"), standin, "127.0.0.1:6000")
    assert {r.url.netloc.decode() for r in seen} == {"127.0.0.1:6000"}


class ProbeEngine:
    """A node engine: reachable or not, holding the base under a config digest, its probe answering `output`."""

    def __init__(self, config: str | None, output: str = "", reachable: bool = True) -> None:
        self.label, self.config, self.output, self.reachable = "node", config, output, reachable
        self.client = SimpleNamespace(system=SimpleNamespace(info=lambda: SimpleNamespace(docker_root_dir="/var/lib/docker")))
        self.probes: list[list[str]] = []
        self.calls: list[tuple[str, list[str], dict[str, str], str]] = []
        self.references: list[str] = []
        self.login_folder = Path("/nonexistent")

    def ping(self) -> dict[str, Any]:
        if not self.reachable:
            raise EngineError("unix:///n.sock is unreachable (refused)", "start it")
        return {"architecture": "x86_64"}

    def profile(self) -> Any:
        return SimpleNamespace(describe=lambda: "docker-26.1-classic")

    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        self.references.append(reference)
        return None if self.config is None else {"Id": self.config}

    def config_digest_of(self, inspect: dict[str, Any], reference: str) -> str:
        self.references.append(reference)
        return inspect["Id"]

    def config_dir(self) -> str:
        return str(self.login_folder)

    def run_probe(self, image: str, argv: list[str], mounts: dict[str, str], network: str = "none") -> str:
        self.probes.append(argv)
        self.calls.append((image, argv, mounts, network))
        return self.output


def test_a_node_without_the_base_fails_its_base_line(standin) -> None:
    with pytest.raises(BaseImageError) as caught:
        doctor.node_base_line(ProbeEngine(None), "spark-a", standin, None)
    assert caught.value.message.startswith("spark-a lacks ") and standin.base.node_name in caught.value.message
    assert caught.value.fix.startswith("run python build.py base sync")


def test_without_a_lock_any_config_of_the_base_passes(standin) -> None:
    engine = ProbeEngine("sha256:" + "9" * 64)
    line = doctor.node_base_line(engine, "spark-a", standin, None)
    assert line == f"spark-a: {standin.base.node_name} (config sha256:{'9' * 12})"
    assert engine.references == [standin.base.node_name] * 2, "the base is inspected and its config read by its node name"


@pytest.mark.parametrize("output", ["", "MemAvailable: 8 kB\n", "MemAvailable:   8388608 kB\n100G\n", "no meminfo\n123\n"])
def test_a_probe_whose_output_is_not_memavailable_and_free_bytes_fails(standin, output: str) -> None:
    with pytest.raises(RolloutError) as caught:
        doctor.node_memory_and_disk_line(ProbeEngine("c", output), "spark-b", standin, GIB, GIB)
    assert caught.value.message.startswith("spark-b: cannot read MemAvailable and free disk (")
    assert repr(output.strip()[:80]) in caught.value.message


def test_the_probe_reads_meminfo_and_the_data_roots_free_bytes(standin) -> None:
    engine = ProbeEngine("c", f"MemAvailable:   {4 * GIB // 1024} kB\n{30 * GIB}\n")
    line = doctor.node_memory_and_disk_line(engine, "spark-b", standin, GIB, 20 * GIB)
    assert line == "spark-b: MemAvailable 4.00 GiB, 30.00 GiB free under /var/lib/docker"
    assert engine.probes == [["sh", "-c", "grep MemAvailable /proc/meminfo; df -B1 --output=avail /var/lib/docker | tail -n 1"]]


def test_memory_and_disk_exactly_at_their_floors_pass(standin) -> None:
    engine = ProbeEngine("c", f"MemAvailable:   {2 * GIB // 1024} kB\n{5 * GIB}\n")
    assert doctor.node_memory_and_disk_line(engine, "n", standin, 2 * GIB, 5 * GIB).startswith("n: MemAvailable 2.00 GiB")


def test_free_disk_here_exactly_at_the_floor_passes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: SimpleNamespace(free=7 * GIB))
    assert doctor.free_disk_line(tmp_path, 7 * GIB) == f"{tmp_path}: 7.00 GiB free"
    with pytest.raises(doctor.ResourceError):
        doctor.free_disk_line(tmp_path, 7 * GIB + 1)


def test_an_unreachable_engine_here_skips_the_registry_and_an_unreachable_node_skips_its_checks(standin, tmp_path, monkeypatch) -> None:
    from kvbake.deployfile import Deployment, Launcher, Node

    node = ProbeEngine("c", reachable=False)
    other = ProbeEngine("c", f"MemAvailable:   {4 * GIB // 1024} kB\n{30 * GIB}\n")
    monkeypatch.setattr(doctor, "Engine", lambda host: {"unix:///n.sock": node, "unix:///m.sock": other}[host])
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: SimpleNamespace(free=100 * GIB))
    monkeypatch.setattr(doctor, "registry_line", lambda *args: pytest.fail("no registry check without an engine"))
    deployment = Deployment(tmp_path / "d.yaml", (Node("n1", "unix:///n.sock", "head"), Node("n2", "unix:///m.sock", "worker")),
                            Launcher(("l",), "serve", 1), 900)
    checks = diagnose(ProbeEngine("c", reachable=False), standin, None, deployment, None, GIB)
    assert [(c.name, c.verdict) for c in checks] == [("engine", FAIL), ("free disk (here)", OK), ("node n1", FAIL), ("node n2", OK),
                                                     ("base on n2", OK), ("memory, disk n2", OK)]
    unreachable = checks[2]
    assert type(unreachable.error) is RolloutError and unreachable.seen.startswith("unix:///n.sock is unreachable")
    assert unreachable.error.fix.startswith("bring the node's engine back, or fix its host in the deployment file")
    assert node.probes == [] and len(other.probes) == 1


def test_a_fail_line_without_an_error_still_gives_an_engine_error() -> None:
    error = first_failure([Check("x", FAIL, "broken")])
    assert type(error) is EngineError and error.message.startswith("doctor: 1 of 1 checks failed")
    assert first_failure([Check("x", OK, "fine"), Check("y", FAIL, "bad", RegistryError("bad", "fix it"))]).exit_code == RegistryError("b").exit_code


def test_a_fail_line_without_a_fix_says_none() -> None:
    assert Check("x", FAIL, "broken", EngineError("broken")).line() == "FAIL  x                      broken"
    assert Check("x", FAIL, "broken").line().endswith("broken")


def test_the_interfaces_are_listed_by_a_probe_of_the_base_on_the_host_network(standin) -> None:
    engine = ProbeEngine("c", " lo\n\nenp1s0\n eth0 \n")
    assert doctor.node_interfaces(engine, standin) == ["enp1s0", "eth0", "lo"]
    assert engine.calls == [(standin.base.node_name, ["ls", "-1", "/sys/class/net"], {}, "host")]


def test_the_memory_probe_runs_the_base_with_the_data_root_mounted_and_no_network(standin) -> None:
    engine = ProbeEngine("c", f"MemAvailable:   {4 * GIB // 1024} kB\n{30 * GIB}\n")
    doctor.node_memory_and_disk_line(engine, "n", standin, GIB, GIB)
    ((image, _, mounts, network),) = engine.calls
    assert (image, mounts, network) == (standin.base.node_name, {"/var/lib/docker": "/var/lib/docker"}, "none")


def interface_node(env: dict[str, str]):
    from kvbake.deployfile import Node
    from kvbake.launcher.core.node_launch import NodeLaunch

    return Node("spark-b", "unix:///b", "worker", launch=NodeLaunch(env=env))


def test_the_interfaces_line_names_every_variable_and_what_the_node_has(standin) -> None:
    node = interface_node({"NCCL_SOCKET_IFNAME": "enp1", "GLOO_SOCKET_IFNAME": "eth0"})
    line = doctor.node_interfaces_line(ProbeEngine("c", "lo\neth0\nenp1s0\n"), node, standin)
    assert line == "spark-b: NCCL_SOCKET_IFNAME=enp1, GLOO_SOCKET_IFNAME=eth0 (of enp1s0, eth0, lo)"


def test_every_missing_interface_is_named_and_a_node_without_any_says_none(standin) -> None:
    from kvbake.errors import ManifestError

    node = interface_node({"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "ib1"})
    with pytest.raises(ManifestError) as caught:
        doctor.node_interfaces_line(ProbeEngine("c", ""), node, standin)
    assert caught.value.message.startswith("spark-b: NCCL_SOCKET_IFNAME=ib0, GLOO_SOCKET_IFNAME=ib1 names no interface")
    assert caught.value.message.endswith("(it has none)")


def test_the_registry_check_reads_the_registry_given_with_the_engines_login(standin, tmp_path, monkeypatch) -> None:
    recorded_registry(monkeypatch, ["t"], login=True)
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: SimpleNamespace(free=100 * GIB))
    engine = ProbeEngine("c")
    engine.login_folder = login_store(tmp_path / "login", "127.0.0.1:6000").folder
    checks = diagnose(engine, standin, None, None, "127.0.0.1:6000", GIB)
    name = standin.output.repository.split("/", 1)[1]
    assert [c.name for c in checks] == ["engine", "registry", "free disk (here)"]
    assert checks[1] == Check("registry", OK, f"127.0.0.1:6000 over TLS, logged in as ops, {name}: 1 tags")


def test_a_deployment_that_requires_signatures_gets_cosigns_reach_checked_after_the_registry(standin, tmp_path, monkeypatch) -> None:
    from kvbake.deployfile import Deployment, Launcher, Signing
    from kvbake.errors import SignatureError

    recorded_registry(monkeypatch, ["t"])
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: SimpleNamespace(free=100 * GIB))
    asked = []
    monkeypatch.setattr(doctor, "registry_reach", lambda reference: asked.append(reference) or "cosign reaches 127.0.0.1:6000")
    signed = Deployment(tmp_path / "d.yaml", (), Launcher(("l",), "serve", 1), 900, signing=Signing(True, (tmp_path / "k.pub",)))
    checks = diagnose(ProbeEngine("c"), standin, None, signed, "127.0.0.1:6000", GIB)
    assert [c.name for c in checks] == ["engine", "registry", "cosign", "free disk (here)"]
    name = standin.output.repository.split("/", 1)[1]
    assert checks[2] == Check("cosign", OK, "cosign reaches 127.0.0.1:6000") and asked == [f"127.0.0.1:6000/{name}:kvbake-doctor"]
    unsigned = Deployment(tmp_path / "d.yaml", (), Launcher(("l",), "serve", 1), 900)
    assert "cosign" not in [c.name for c in diagnose(ProbeEngine("c"), standin, None, unsigned, "127.0.0.1:6000", GIB)]

    def unverified(reference: str) -> str:
        raise SignatureError("cosign cannot reach 127.0.0.1:6000 (x509: certificate signed by unknown authority)", "give the CA")
    monkeypatch.setattr(doctor, "registry_reach", unverified)
    failed = diagnose(ProbeEngine("c"), standin, None, signed, "127.0.0.1:6000", GIB)[2]
    assert (failed.name, failed.verdict) == ("cosign", FAIL) and failed.error.exit_code == SignatureError.exit_code


class DigestOnlyEngine(ProbeEngine):
    """A node that holds a digest-pinned base by digest only: the serve pulled it so, `base sync` has not tagged it."""

    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        self.references.append(reference)
        return {"Id": self.config} if "@sha256:" in reference else None


def digest_pinned(standin):
    import dataclasses

    return dataclasses.replace(standin, base=dataclasses.replace(standin.base, image="registry.lan:5000/vllm/base:0.33@sha256:" + "a" * 64))


def test_a_digest_pinned_base_not_yet_synced_passes_and_the_node_probes_run_it_by_digest(standin) -> None:
    """Before the runbook's `base sync` the node holds the base by digest only: doctor --deploy names it and the step
    that tags it, and still checks memory, disk and interfaces with it (before, it failed and skipped them)."""
    manifest = digest_pinned(standin)
    engine = DigestOnlyEngine("sha256:" + "9" * 64, f"MemAvailable:   {4 * GIB // 1024} kB\n{30 * GIB}\n")
    line = doctor.node_base_line(engine, "spark-a", manifest, None)
    assert line == (f"spark-a: {manifest.base.image} (config sha256:{'9' * 12}); `base sync` tags it {manifest.base.node_name} "
                    "after push (runbook §5)")
    assert doctor.node_memory_and_disk_line(engine, "spark-a", manifest, GIB, GIB).startswith("spark-a: MemAvailable 4.00 GiB")
    assert [image for image, *_ in engine.calls] == [manifest.base.image]


def test_a_base_held_by_digest_with_another_config_than_the_lock_fails(standin) -> None:
    manifest = digest_pinned(standin)
    lock = SimpleNamespace(base=SimpleNamespace(config_digest="sha256:" + "1" * 64))
    with pytest.raises(BaseImageError) as caught:
        doctor.node_base_line(DigestOnlyEngine("sha256:" + "9" * 64), "spark-a", manifest, lock)
    assert caught.value.message.startswith(f"spark-a: {manifest.base.image} is config sha256:{'9' * 12}")


class OnceSilentEngine(ProbeEngine):
    """A node whose first probe's output is lost (a throw-away container under load), the second one answers."""

    def run_probe(self, image: str, argv: list[str], mounts: dict[str, str], network: str = "none") -> str:
        answer = super().run_probe(image, argv, mounts, network)
        return "" if len(self.probes) == 1 else answer


def test_a_memory_probe_whose_output_was_lost_runs_once_more(standin) -> None:
    engine = OnceSilentEngine("c", f"MemAvailable:   {4 * GIB // 1024} kB\n{30 * GIB}\n")
    assert doctor.node_memory_and_disk_line(engine, "spark-a", standin, GIB, GIB).startswith("spark-a: MemAvailable 4.00 GiB")
    assert len(engine.probes) == 2
