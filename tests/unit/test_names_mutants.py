"""A container name Docker would refuse is refused with a fix that says how to name it; a good one passes unchanged."""

from __future__ import annotations

import pytest

from kvbake.errors import UsageError
from kvbake.names import check_container_name


def test_a_container_name_docker_refuses_comes_with_a_fix_naming_docker_ps():
    with pytest.raises(UsageError) as caught:
        check_container_name("$(reboot)", "--container")
    assert caught.value.fix is not None and "docker ps" in caught.value.fix
    assert "--container" in caught.value.message and "'$(reboot)'" in caught.value.message


def test_a_container_name_docker_accepts_is_returned_as_given():
    assert check_container_name("vllm_node.1-a", "--container") == "vllm_node.1-a"
