"""Which mounts make the served overlay: bind mounts and volumes count, other kinds are passed over, a mount above the
source root is refused whatever its trailing slash and with a fix, and bytecode caches are no served file."""

from __future__ import annotations

import pytest

from kvbake.bake.core.served_overlay import overlay_mounts, served_paths
from kvbake.errors import UsageError

ROOT = "/usr/lib/py"


def test_bind_mounts_and_volumes_under_the_source_root_count_and_other_kinds_are_passed_over():
    container = {"Name": "/serve", "Mounts": [
        {"Type": "tmpfs", "Source": "", "Destination": f"{ROOT}/vllm/cache"},
        {"Type": "volume", "Source": "/var/lib/docker/volumes/v/_data", "Destination": f"{ROOT}/vllm/models"},
        {"Type": "tmpfs", "Source": "", "Destination": "/usr/lib"},
        {"Type": "bind", "Source": "/srv/a.py", "Destination": f"{ROOT}/vllm/a.py"},
    ]}
    assert overlay_mounts(container, ROOT) == ((f"{ROOT}/vllm/a.py", "/srv/a.py"),
                                               (f"{ROOT}/vllm/models", "/var/lib/docker/volumes/v/_data"))


def test_a_mount_the_engine_reports_without_a_source_is_listed_with_an_empty_source():
    assert overlay_mounts({"Mounts": [{"Type": "bind", "Destination": f"{ROOT}/vllm/a.py"}]}, ROOT) == ((f"{ROOT}/vllm/a.py", ""),)


def test_a_mount_the_engine_reports_without_a_destination_is_refused_as_covering_the_package_tree():
    with pytest.raises(UsageError):
        overlay_mounts({"Name": "/serve", "Mounts": [{"Type": "bind", "Source": "/srv/x"}]}, ROOT)


@pytest.mark.parametrize(("target", "root"), [("/usr/lib/", ROOT), ("/opt/libX", "/opt/libX/py")])
def test_a_mount_over_a_folder_above_the_source_root_is_refused_with_a_fix(target, root):
    with pytest.raises(UsageError) as refused:
        overlay_mounts({"Name": "/serve", "Mounts": [{"Type": "bind", "Source": "/srv/x", "Destination": target}]}, root)
    assert target in refused.value.message and refused.value.fix


def test_bytecode_and_everything_in_a_bytecode_cache_folder_are_no_served_file():
    listed = {"vllm/a.py": "C", "vllm/a.pyc": "A", "vllm/__pycache__/a.cpython-312.pyc": "A", "vllm/__pycache__/notes.txt": "A"}
    assert served_paths(listed) == ("vllm/a.py",)
