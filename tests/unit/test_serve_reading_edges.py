"""The `ray start` rebuilt from a raylet's own arguments: read from its first option on, with resources or a GCS address missing."""

from __future__ import annotations

from kvbake.serve.core.serve_reading import ray_start_of_raylet

RAYLET = "/usr/local/lib/python3.12/dist-packages/ray/core/src/ray/raylet/raylet"


def test_the_raylets_first_option_is_read():
    argv = (RAYLET, "--node_ip_address=10.0.0.12", "--gcs-address=10.0.0.11:6379")
    assert ray_start_of_raylet(argv) == ("ray", "start", "--address=10.0.0.11:6379", "--node-ip-address=10.0.0.12")


def test_a_raylet_without_resources_or_gcs_address_rebuilds_an_empty_address():
    assert ray_start_of_raylet((RAYLET, "--node_ip_address=10.0.0.12")) == ("ray", "start", "--address=", "--node-ip-address=10.0.0.12")


def test_a_head_without_a_gcs_address_rebuilds_an_empty_port():
    assert ray_start_of_raylet((RAYLET, "--head")) == ("ray", "start", "--head", "--port=")


def test_a_head_on_an_ipv6_gcs_address_keeps_the_port_after_the_last_colon():
    argv = (RAYLET, "--head", "--gcs-address=[fd00::11]:6390", "--static_resource_list=CPU,8,GPU,1.0")
    assert ray_start_of_raylet(argv) == ("ray", "start", "--head", "--port=6390", "--num-cpus=8", "--num-gpus=1")
