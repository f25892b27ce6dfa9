"""`init --capture`: a served file the image also holds is captured as a change of the image's bytes, and a serve with
nothing to capture is refused with a fix."""

from __future__ import annotations

import pytest

from kvbake.errors import UsageError
from test_project_init_nodes import MODEL_MOUNT, OVERLAY_MOUNTS, nodes, pair, run_init, serving_files  # noqa: F401  (fixture)


def test_a_captured_file_the_image_holds_is_a_patch_from_the_images_bytes(nodes, tmp_path):
    pair(nodes, mounts=(MODEL_MOUNT, *OVERLAY_MOUNTS))
    nodes["ssh://ops@spark-b"].containers["vllm_node"]["Mounts"] = [MODEL_MOUNT, *OVERLAY_MOUNTS]
    serving_files(nodes)
    run_init(tmp_path, "--capture")
    patch = (tmp_path / "patches" / "cap001-vllm-a.patch").read_text()
    assert "new file mode" not in patch
    assert "-a = 1" in patch.splitlines() and "+a = 'mounted'" in patch.splitlines()


def test_capture_with_nothing_to_capture_says_how_to_go_on(nodes, tmp_path):
    pair(nodes)
    with pytest.raises(UsageError) as caught:
        run_init(tmp_path, "--capture")
    assert caught.value.fix is not None and "without --capture" in caught.value.fix
