"""`doctor` on real engines: every check passes on the rig; a node that is down or lacks the base is one FAIL line,
and the exit code is that failure's; the registry line checks TLS and the engine's login store."""

from __future__ import annotations

import json
import re

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake_rig import Credentials, LocalRegistry, NodeEngine, login, private_client, write_htpasswd

from conftest import run
from shiprig import BASE, STANDIN_LAUNCHER, write_deploy

pytestmark = pytest.mark.docker


def doctor(capsys, shipped, rig, deploy_file, *extra):
    return run(capsys, "doctor", "--manifest", str(shipped["manifest"]), "--deploy", str(deploy_file), "--registry",
               rig["registry"].address, "--disk-floor", "0.1", "--mem-floor", "0.1", *extra)


def test_every_check_passes_on_the_rig(capsys, shipped, rig, tmp_path):
    code, out, err = doctor(capsys, shipped, rig, shipped["deploy"], "--json")
    assert code == 0, out + err
    checks = {c["check"]: c for c in json.loads(out)["checks"]}
    assert set(checks) == {"engine", "registry", "free disk (here)", "node spark-a", "base on spark-a", "memory, disk spark-a",
                           "node spark-b", "base on spark-b", "memory, disk spark-b"}
    assert all(c["verdict"] == "ok" for c in checks.values())
    assert "plain HTTP (loopback only)" in checks["registry"]["seen"] and "MemAvailable" in checks["memory, disk spark-b"]["seen"]
    assert BASE in checks["base on spark-a"]["seen"]


def test_a_node_without_the_base_fails_its_line_and_the_run(capsys, shipped, rig, tmp_path):
    with NodeEngine(tmp_path / "c", name="c") as bare:
        document = json.loads(shipped["deploy"].read_text())
        document["nodes"][1]["host"] = bare.host
        deploy_file = tmp_path / "deploy.yaml"
        deploy_file.write_text(json.dumps(document))
        code, out, err = doctor(capsys, shipped, rig, deploy_file)
    assert code == 6, out + err
    assert re.search(rf"^FAIL +base on spark-b +spark-b lacks {re.escape(BASE)}; fix: run python build\.py base sync$", out, re.MULTILINE), out
    assert err == ("error (base image): doctor: 1 of 8 checks failed (the FAIL lines above); the first, base on spark-b, gives the "
                   "exit code; fix: do what each FAIL line's fix says, then run doctor again\n")


def test_an_unreachable_node_is_named(capsys, shipped, rig, tmp_path):
    deploy_file = write_deploy(tmp_path, {**rig, "b_host": f"unix://{tmp_path}/gone.sock"}, STANDIN_LAUNCHER)
    code, out, err = doctor(capsys, shipped, rig, deploy_file)
    assert code == 12 and "FAIL  node spark-b" in out and "is unreachable" in out, out + err
    assert err.startswith("error (rollout): doctor: 1 of 7 checks failed (the FAIL lines above); the first, node spark-b,"), err
    assert "is unreachable" not in err and err.count("\n") == 1, err
    assert Engine(rig["a"].host).ping()


def with_interfaces(shipped, tmp_path, env_b: dict[str, str]):
    document = json.loads(shipped["deploy"].read_text())
    document["nodes"][1]["launch"] = {"env": env_b}
    deploy_file = tmp_path / "deploy.yaml"
    deploy_file.write_text(json.dumps(document))
    return deploy_file


def test_an_interface_the_node_has_passes(capsys, shipped, rig, tmp_path):
    deploy_file = with_interfaces(shipped, tmp_path, {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"})
    code, out, err = doctor(capsys, shipped, rig, deploy_file, "--json")
    assert code == 0, out + err
    checks = {c["check"]: c for c in json.loads(out)["checks"]}
    assert checks["interfaces spark-b"]["verdict"] == "ok" and "interfaces spark-a" not in checks


def test_an_interface_the_node_lacks_is_named_with_the_ones_it_has(capsys, shipped, rig, tmp_path):
    deploy_file = with_interfaces(shipped, tmp_path, {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "kvbake-none0"})
    code, out, err = doctor(capsys, shipped, rig, deploy_file, "--json")
    assert code == 3, out + err
    fail = {c["check"]: c for c in json.loads(out)["checks"]}["interfaces spark-b"]
    assert fail["verdict"] == "FAIL"
    assert "GLOO_SOCKET_IFNAME=kvbake-none0 names no interface of the node" in fail["seen"] and "lo" in fail["seen"].split("(it has ")[1]
    assert err.startswith("error (manifest): doctor: 1 of 10 checks failed (the FAIL lines above); the first, interfaces spark-b")


def store_with_wrong_password(folder, address: str, username: str):
    import base64

    folder.mkdir(parents=True)
    auth = base64.b64encode(f"{username}:not-the-password".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {address: {"auth": auth}}}))
    return folder


def test_the_registry_line_checks_tls_and_the_engines_login(capsys, tiny, tmp_path, monkeypatch):
    """A TLS + htpasswd registry: no login stored, then a wrong one, are each the registry's FAIL line and exit 11,
    naming no secret; with the engine's login it is an ok line saying TLS and the user."""
    credentials = Credentials.generate("pusher")
    htpasswd = write_htpasswd(tmp_path / "auth" / "htpasswd", credentials)
    with LocalRegistry(tmp_path / "registry", tls=True, htpasswd=htpasswd, username="pusher") as secured:
        address = secured.address

        def doctor_here() -> tuple[int, str, str]:
            return run(capsys, "doctor", "--manifest", str(tiny), "--registry", address, "--disk-floor", "0.1")

        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty-store"))
        code, out, err = doctor_here()
        cause, fix = (f"registry {address} requires a login and the engine's login store has none for it",
                      f"docker login {address} (with the same DOCKER_CONFIG), then retry")
        assert code == 11, out + err
        assert re.search(rf"^FAIL +registry +{re.escape(cause)}; fix: {re.escape(fix)}$", out, re.MULTILINE), out
        assert err == ("error (registry): doctor: 1 of 3 checks failed (the FAIL lines above); the first, registry, gives the exit "
                       "code; fix: do what each FAIL line's fix says, then run doctor again\n")

        monkeypatch.setenv("DOCKER_CONFIG", str(store_with_wrong_password(tmp_path / "wrong-store", address, "pusher")))
        code, out, err = doctor_here()
        cause, fix = f"registry {address} refused the stored credentials of user pusher", f"docker login {address} again with the right password"
        assert code == 11 and "not-the-password" not in out + err, out + err
        assert err == ("error (registry): doctor: 1 of 3 checks failed (the FAIL lines above); the first, registry, gives the exit "
                       "code; fix: do what each FAIL line's fix says, then run doctor again\n")

        login(private_client(tmp_path / "store"), address, credentials)
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "store"))
        code, out, err = doctor_here()
        assert (code, err) == (0, ""), out + err
        assert re.search(rf"^ok +registry +{re.escape(address)} over TLS, logged in as pusher, tiny: 0 tags$", out, re.MULTILINE), out
        assert credentials.password not in out
