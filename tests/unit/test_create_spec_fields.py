"""A container's create spec read from its inspect data: which Config and HostConfig fields are kept, when the hostname
counts, what cannot be restored, and how a container now differs from the one recorded."""

from __future__ import annotations

from kvbake.ship.core.create_spec import command_line, create_spec, spec_differences, unrestorable

INSPECT = {
    "Id": "0123456789abcdef", "Name": "/vllm-serve", "Image": "sha256:" + "a" * 64,
    "Config": {"Entrypoint": ["python3"], "Cmd": ["-m", "vllm"], "Env": ["A=1"], "Labels": {}, "WorkingDir": "", "Tty": False,
               "User": "1000", "Hostname": "0123456789ab", "StopSignal": "SIGINT", "Image": "spark:v5"},
    "HostConfig": {"ShmSize": 16, "CapAdd": ["IPC_LOCK"], "Privileged": False, "Links": None, "RestartPolicy": {"Name": "no"},
                   "NetworkMode": "bridge", "CpuQuota": 0, "Ulimits": []},
}


def test_only_set_fields_are_kept_with_the_image_and_the_name_without_slash():
    spec = create_spec(INSPECT)
    assert spec["image"] == "sha256:" + "a" * 64 and spec["name"] == "vllm-serve"
    assert spec["config"] == {"Entrypoint": ["python3"], "Cmd": ["-m", "vllm"], "Env": ["A=1"], "User": "1000", "StopSignal": "SIGINT"}
    assert spec["host"] == {"ShmSize": 16, "CapAdd": ["IPC_LOCK"], "RestartPolicy": {"Name": "no"}, "NetworkMode": "bridge"}
    spec["host"]["CapAdd"].append("SYS_NICE")
    assert INSPECT["HostConfig"]["CapAdd"] == ["IPC_LOCK"], "the spec is a copy"


def test_the_spec_is_a_deep_copy_that_later_changes_to_the_inspect_data_leave_alone():
    inspect = {**INSPECT, "Config": {**INSPECT["Config"], "Healthcheck": {"Test": ["CMD", "curl", "-f", "http://127.0.0.1:8000/health"]}},
               "HostConfig": {"PortBindings": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8000"}]}}}
    spec = create_spec(inspect)
    inspect["Config"]["Healthcheck"]["Test"].append("--retry")
    inspect["HostConfig"]["PortBindings"]["8000/tcp"][0]["HostPort"] = "9000"
    assert spec["config"]["Healthcheck"] == {"Test": ["CMD", "curl", "-f", "http://127.0.0.1:8000/health"]}
    assert spec["host"]["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8000"}]}


def test_the_name_loses_only_dockers_slash_whatever_letter_it_begins_with():
    assert create_spec({"Name": "/Xvllm"})["name"] == "Xvllm"


def test_a_hostname_is_kept_only_when_the_operator_chose_it():
    chosen = {**INSPECT, "Config": {**INSPECT["Config"], "Hostname": "spark-a"}}
    assert create_spec(chosen)["config"]["Hostname"] == "spark-a"
    host_network = {**chosen, "HostConfig": {**INSPECT["HostConfig"], "NetworkMode": "host"}}
    assert "Hostname" not in create_spec(host_network)["config"]
    assert "Hostname" not in create_spec(INSPECT)["config"]
    assert create_spec({})["config"] == {} and create_spec({}) == {"image": "", "name": "", "config": {}, "host": {}}


def test_settings_kvbake_cannot_restore_are_named():
    assert unrestorable(INSPECT) == []
    assert unrestorable({"HostConfig": {"Links": ["/db:/app/db"], "CpuQuota": 50000, "CpuPeriod": 0}}) == ["Links", "CpuQuota"]
    assert unrestorable({}) == []


def test_the_command_line_is_the_entrypoint_then_the_command():
    assert command_line(create_spec(INSPECT)) == ["python3", "-m", "vllm"]
    assert command_line({"config": {"Cmd": ["serve"]}}) == ["serve"] and command_line({}) == []


def test_differences_name_each_changed_field_but_not_the_entrypoint_split_or_empty_values_or_list_order():
    recorded = create_spec(INSPECT)
    same = create_spec({**INSPECT, "Config": {**INSPECT["Config"], "Entrypoint": ["python3", "-m"], "Cmd": ["vllm"], "Labels": None},
                        "HostConfig": {**INSPECT["HostConfig"], "CapAdd": ["IPC_LOCK"], "Ulimits": None}})
    assert spec_differences(recorded, same) == []
    reordered = {**recorded, "config": {**recorded["config"], "Env": ["B=2", "A=1"]}}
    assert spec_differences({**recorded, "config": {**recorded["config"], "Env": ["A=1", "B=2"]}}, reordered) == []
    changed = create_spec({**INSPECT, "Image": "sha256:" + "b" * 64, "Config": {**INSPECT["Config"], "Cmd": ["-m", "other"], "User": "0"},
                           "HostConfig": {**INSPECT["HostConfig"], "ShmSize": 32}})
    found = spec_differences(recorded, changed)
    assert found[0] == f"image {'sha256:' + 'b' * 12}, not {'sha256:' + 'a' * 12}"
    assert found[1] == "command ['python3', '-m', 'other'], not ['python3', '-m', 'vllm']"
    assert found[2:] == ["User '0', not '1000'", "ShmSize 32, not 16"]
    nested = {**recorded, "host": {**recorded["host"], "Ulimits": [{"Name": "memlock"}]}}
    assert spec_differences(recorded, nested) == ["Ulimits [{'Name': 'memlock'}], not None"]
