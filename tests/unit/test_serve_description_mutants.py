"""What init says about a privileged serve names each device and each capability kvbake's serve gets in its place."""

from __future__ import annotations

from kvbake.serve.core.serve_description import privileged_line

from message_words import says


def test_every_device_and_capability_of_a_privileged_serve_is_named_on_its_own():
    launch = {"devices": ["/dev/infiniband", "/dev/nvidia-caps"], "cap_add": ["IPC_LOCK", "SYS_NICE"], "ulimits": {"memlock": -1}}
    line = privileged_line("spark-a", launch)
    assert says(line, "spark-a")
    assert all(says(line, name) for name in ("/dev/infiniband", "/dev/nvidia-caps", "IPC_LOCK", "SYS_NICE", "memlock=-1"))
