"""A container read without an ID keeps the host name it was given, whatever that name is: only a host name the
engine derived from the container's own ID is dropped."""

from __future__ import annotations

import pytest

from kvbake.ship.core.create_spec import create_spec


@pytest.mark.parametrize("hostname", ["N", "None", "X", "spark-a"])
def test_a_container_without_an_id_keeps_its_host_name(hostname):
    spec = create_spec({"Name": "/s", "Image": "sha256:" + "a" * 64, "Config": {"Hostname": hostname},
                        "HostConfig": {"NetworkMode": "none"}})
    assert spec["config"]["Hostname"] == hostname
