"""Process checks: a Ray worker rank without a Ray node names its main process; odd change kinds; the baked origin."""

from __future__ import annotations

from kvbake.ship.core.process_checks import change_failures, expected_origin, ray_worker_failures
from kvbake.serve.core.serve_reading import read_serve
from message_words import says
from test_process_checks import NAMES, ROOT, proc


def test_a_long_main_process_is_named_by_its_first_80_characters():
    argv = ("sleep", "x" * 100)
    [failure] = ray_worker_failures("b", read_serve([proc(1, 0, argv)]), {}, NAMES)
    shown = " ".join(argv)[:80]
    assert says(failure, f"its main process is {shown}, and no raylet runs beside it)")


def test_a_rank_without_a_main_process_says_it_runs_nothing():
    [failure] = ray_worker_failures("b", read_serve([]), {}, NAMES)
    assert says(failure, "its main process is nothing")


def test_a_change_of_a_kind_without_a_word_is_named_by_its_letter():
    [failure] = change_failures("n1", {ROOT + "/vllm/x.py": "R"}, ROOT)
    assert says(failure, f"{ROOT}/vllm/x.py was R in the running container")


def test_the_baked_vllm_is_under_the_source_root_however_many_slashes_end_it():
    assert expected_origin("/opt/X//") == "/opt/X/vllm/__init__.py"
