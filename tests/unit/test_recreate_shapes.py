"""Recorded create specs in the less common shapes the engine writes: a bare shell healthcheck, IPv6 hosts, a GPU request with no count."""

from __future__ import annotations

from kvbake.engines.adapters.recreate import create_arguments


def test_a_shell_healthcheck_without_its_command_sets_no_health_command():
    options = create_arguments({"image": "i", "config": {"Healthcheck": {"Test": ["CMD-SHELL"]}}}, "n")[2]
    assert "health_cmd" not in options and options["healthcheck"] is True


def test_an_extra_host_with_an_ipv6_address_splits_at_its_first_colon():
    options = create_arguments({"image": "i", "host": {"ExtraHosts": ["spark-b:fe80::1", "spark-c:10.0.0.13"]}}, "n")[2]
    assert options["add_hosts"] == [("spark-b", "fe80::1"), ("spark-c", "10.0.0.13")]


def test_a_gpu_request_without_a_count_or_devices_asks_for_every_gpu():
    assert create_arguments({"image": "i", "host": {"DeviceRequests": [{"Driver": "nvidia"}]}}, "n")[2]["gpus"] == "all"
