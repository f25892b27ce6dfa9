"""A mount may not shadow vLLM from the container's working directory, whatever the spelling of that directory."""

from __future__ import annotations

import pytest

from kvbake.launcher.core.node_launch import LaunchInputError, refuse_shadowing_target

from message_words import says


@pytest.mark.parametrize("workdir", ["", "/"])
def test_a_mount_at_the_root_is_no_shadow_when_the_working_directory_is_the_root(workdir):
    refuse_shadowing_target("EXTRA_MOUNTS", "/", workdir)


@pytest.mark.parametrize(("target", "workdir", "named"), [
    ("/app/vllm", "/app/", "/app"),
    ("/opt/ONNX/vllm", "/opt/ONNX", "/opt/ONNX"),
    ("/opt/ONNX/vllm", "/opt/ONNX/", "/opt/ONNX"),
])
def test_a_vllm_folder_right_in_the_working_directory_is_refused_with_or_without_a_trailing_slash(target, workdir, named):
    with pytest.raises(LaunchInputError) as caught:
        refuse_shadowing_target("EXTRA_MOUNTS", target, workdir)
    assert says(caught.value.cause, f"target {target}") and says(caught.value.cause, f"working directory {named}")
