"""`build.py push` through a registry whose blob reads redirect to another host: read-back works, credentials stay home."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kvbake.registry.adapters.registry_api import USER_AGENT
from kvbake_rig import Credentials, LocalRegistry, login, private_client, write_htpasswd
from kvbake_rig.redirect_front import RedirectFront

from conftest import run

pytestmark = pytest.mark.docker


@pytest.fixture()
def credentials() -> Credentials:
    return Credentials.generate("pusher")


@pytest.fixture()
def front(tmp_path: Path, credentials: Credentials) -> Iterator[RedirectFront]:
    """A htpasswd registry behind a front that answers blob reads with a 307 to a storage port."""
    htpasswd = write_htpasswd(tmp_path / "auth" / "htpasswd", credentials)
    with LocalRegistry(tmp_path / "registry", htpasswd=htpasswd, username=credentials.username) as registry:
        assert registry.endpoint is not None
        with RedirectFront(registry.endpoint, credentials) as running:
            yield running


def test_the_front_redirects_blob_reads_and_checks_the_login_first(front: RedirectFront, credentials: Credentials):
    with httpx.Client(base_url=f"http://{front.address}", trust_env=False, timeout=10.0) as http:
        anonymous = http.head(f"/v2/tiny/blobs/sha256:{'a' * 64}")
        known = http.head(f"/v2/tiny/blobs/sha256:{'a' * 64}", auth=(credentials.username, credentials.password))
        forged = http.get(f"http://{front.storage_address}/storage/tiny/sha256:{'a' * 64}?signature=0")
    assert anonymous.status_code == 401 and "Basic" in anonymous.headers["WWW-Authenticate"]
    assert known.status_code == 404
    assert forged.status_code == 403 and front.hits[-1].authorization is False


def test_push_through_a_redirecting_registry_reads_back_without_leaking_credentials(capsys, engine, tiny, tmp_path, monkeypatch,
                                                                                   front: RedirectFront, credentials: Credentials):
    code, out, err = run(capsys, "build", "--manifest", str(tiny), "--json")
    assert code == 0, err
    built = json.loads(out)
    login(private_client(tmp_path / "store"), front.address, credentials)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "store"))
    code, out, err = run(capsys, "push", "--manifest", str(tiny), "--registry", front.address, "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["status"] == "pushed" and record["config_digest"] == built["config_digest"]
    assert record["pinned"] == f"{front.address}/tiny@{record['manifest_digest']}"
    ours = [hit for hit in front.hits if hit.user_agent == USER_AGENT]
    assert ("GET", record["config_digest"]) in {(hit.method, hit.digest) for hit in ours}
    assert {("HEAD", layer["digest"]) for layer in record["layers"]} <= {(hit.method, hit.digest) for hit in ours}
    assert [hit for hit in front.hits if hit.authorization] == []
    print(f"storage served {len(front.hits)} redirected blob reads ({len(ours)} from kvbake), none with Authorization")
