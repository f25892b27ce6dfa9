"""A recorded create spec becomes python-on-whales' `container.create` arguments that make the same container again:
every option kvbake carries over, each default left out, and the shapes the engine writes them in."""

from __future__ import annotations

import pytest

from kvbake.engines.adapters.recreate import create_arguments

FULL_SPEC = {
    "image": "sha256:" + "a" * 64,
    "config": {
        "Entrypoint": ["/bin/sh", "/serve.sh"], "Cmd": ["--port", "8000"],
        "Env": ["A=1", "B=x=y", "BROKEN"], "Labels": {"l": "v"}, "WorkingDir": "/work", "User": "1000:1000",
        "Hostname": "spark-a", "Domainname": "lan", "Tty": True, "OpenStdin": True, "StopSignal": "SIGINT", "StopTimeout": 30,
        "ExposedPorts": {"8000/tcp": {}, "9000/udp": {}},
        "Healthcheck": {"Test": ["CMD-SHELL", "curl -f localhost:8000/health"]},
    },
    "host": {
        "Binds": ["/models:/models:ro", "/cache:/root/.cache"],
        "Mounts": [{"Type": "bind", "Source": "/src", "Target": "/dst", "ReadOnly": True, "BindOptions": {"Propagation": "rslave"}},
                   {"Type": "tmpfs", "Target": "/scratch"}],
        "NetworkMode": "host", "IpcMode": "host", "PidMode": "host", "UTSMode": "host", "UsernsMode": "host", "CgroupnsMode": "private",
        "ShmSize": 17179869184, "Privileged": True, "CapAdd": ["IPC_LOCK"], "CapDrop": ["MKNOD"],
        "Devices": [{"PathOnHost": "/dev/infiniband", "PathInContainer": "/dev/infiniband", "CgroupPermissions": "rw"},
                    {"PathOnHost": "/dev/null", "PathInContainer": "/dev/x"}],
        "DeviceRequests": [{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}],
        "Ulimits": [{"Name": "memlock", "Soft": -1, "Hard": -1}, {"Name": "stack", "Soft": 67108864, "Hard": 67108864}],
        "RestartPolicy": {"Name": "on-failure", "MaximumRetryCount": 3}, "AutoRemove": True, "Init": True,
        "SecurityOpt": ["seccomp=unconfined"], "GroupAdd": ["video"], "Memory": 1024, "MemorySwap": 2048, "MemoryReservation": 512,
        "PidsLimit": 100, "CpusetCpus": "0-2,5", "CpusetMems": "0", "NanoCpus": 1500000000, "CpuShares": 512, "Runtime": "nvidia",
        "Sysctls": {"net.core.somaxconn": "1024"}, "ExtraHosts": ["spark-b:10.0.0.12"], "Dns": ["10.0.0.1"], "DnsOptions": ["ndots:1"],
        "DnsSearch": ["lan"], "Tmpfs": {"/run": "size=64m", "/tmp": ""}, "LogConfig": {"Type": "json-file", "Config": {"max-size": "10m"}},
        "OomScoreAdj": -500, "OomKillDisable": True, "ReadonlyRootfs": True,
        "PortBindings": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18000"}, {"HostIp": "", "HostPort": "28000"}],
                         "9000/udp": [{"HostIp": "", "HostPort": ""}], "7000": [{"HostPort": "17000"}]},
        "PublishAllPorts": True, "CgroupParent": "/kvbake",
    },
}

FULL_OPTIONS = {
    "name": "vllm-serve", "pull": "never", "entrypoint": "/bin/sh",
    "envs": {"A": "1", "B": "x=y"}, "labels": {"l": "v"}, "workdir": "/work", "user": "1000:1000", "hostname": "spark-a",
    "domainname": "lan", "tty": True, "interactive": True, "stop_signal": "SIGINT", "stop_timeout": 30, "expose": [8000, 9000],
    "health_cmd": "curl -f localhost:8000/health", "healthcheck": True,
    "volumes": [("/models", "/models", "ro"), ("/cache", "/root/.cache")],
    "mounts": [["type=bind", "target=/dst", "source=/src", "readonly", "bind-propagation=rslave"], ["type=tmpfs", "target=/scratch"]],
    "networks": ["host"], "ipc": "host", "pid": "host", "uts": "host", "userns": "host", "cgroupns": "private", "shm_size": 17179869184,
    "privileged": True, "cap_add": ["IPC_LOCK"], "cap_drop": ["MKNOD"],
    "devices": ["/dev/infiniband:/dev/infiniband:rw", "/dev/null:/dev/x:rwm"], "gpus": "all",
    "ulimit": ["memlock=-1:-1", "stack=67108864:67108864"], "restart": "on-failure:3", "remove": True, "init": True,
    "security_options": ["seccomp=unconfined"], "groups_add": ["video"], "memory": 1024, "memory_swap": 2048, "memory_reservation": 512,
    "pids_limit": 100, "cpuset_cpus": [0, 1, 2, 5], "cpuset_mems": [0], "cpus": 1.5, "cpu_shares": 512, "runtime": "nvidia",
    "sysctl": {"net.core.somaxconn": "1024"}, "add_hosts": [("spark-b", "10.0.0.12")], "dns": ["10.0.0.1"], "dns_options": ["ndots:1"],
    "dns_search": ["lan"], "tmpfs": ["/run:size=64m", "/tmp"], "log_driver": "json-file", "log_options": ["max-size=10m"],
    "oom_score_adj": -500, "oom_kill": False, "read_only": True,
    "publish": [("127.0.0.1:18000", "8000", "tcp"), ("28000", "8000", "tcp"), ("17000", "7000", "tcp")], "publish_all": True,
    "cgroup_parent": "/kvbake",
}


def test_every_recorded_setting_comes_back_as_its_create_option():
    image, command, options = create_arguments(FULL_SPEC, "vllm-serve")
    assert image == FULL_SPEC["image"]
    assert command == ["/serve.sh", "--port", "8000"], "the entrypoint's other words lead the command"
    assert options == FULL_OPTIONS


def test_a_bare_spec_gives_the_name_never_pull_and_every_switch_at_the_engine_default_and_nothing_else():
    image, command, options = create_arguments({"image": "img:1"}, "serve")
    assert (image, command) == ("img:1", [])
    assert options == {"name": "serve", "pull": "never", "tty": False, "interactive": False, "healthcheck": True, "privileged": False,
                       "remove": False, "init": False, "oom_kill": True, "read_only": False, "publish_all": False}


@pytest.mark.parametrize(("restart", "expected"), [
    ({"Name": "no"}, None), ({"Name": ""}, None), ({"Name": "always"}, "always"), ({"Name": "unless-stopped"}, "unless-stopped"),
    ({"Name": "on-failure", "MaximumRetryCount": 0}, "on-failure"), ({"Name": "on-failure", "MaximumRetryCount": 5}, "on-failure:5"),
])
def test_the_restart_policy_is_carried_as_the_cli_spells_it(restart, expected):
    assert create_arguments({"image": "i", "host": {"RestartPolicy": restart}}, "n")[2].get("restart") == expected


@pytest.mark.parametrize(("requests", "expected"), [
    ([], None),
    ([{"Driver": "nvidia", "Count": -1}], "all"),
    ([{"Capabilities": [["gpu"]], "Count": 2}], "2"),
    ([{"Capabilities": [["gpu"]], "DeviceIDs": ["0", "3"]}], "device=0,3"),
    ([{"Capabilities": [["compute"]], "Count": 1}], None),
    ([{"Driver": "other", "Count": 1}, {"Driver": "nvidia", "Count": 1}], "1"),
])
def test_gpu_requests_become_the_gpus_option(requests, expected):
    assert create_arguments({"image": "i", "host": {"DeviceRequests": requests}}, "n")[2].get("gpus") == expected


def test_a_default_network_and_a_disabled_healthcheck_and_oom_kill_are_kept_as_such():
    spec = {"image": "i", "config": {"Healthcheck": {"Test": ["NONE"]}},
            "host": {"NetworkMode": "default", "OomKillDisable": False, "Mounts": [{"Target": "/t"}]}}
    options = create_arguments(spec, "n")[2]
    assert "networks" not in options and options["healthcheck"] is False and options["oom_kill"] is True
    assert options["mounts"] == [["type=bind", "target=/t"]], "a mount without a type is a bind; no source, no readonly"


def test_a_health_test_that_is_not_a_shell_line_sets_no_health_command():
    spec = {"image": "i", "config": {"Healthcheck": {"Test": ["CMD", "curl", "x"]}}}
    options = create_arguments(spec, "n")[2]
    assert "health_cmd" not in options and options["healthcheck"] is True
