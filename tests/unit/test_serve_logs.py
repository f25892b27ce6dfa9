"""Why a serving container stopped: the root exception from real vLLM start-up failures, not the wrappers."""

from __future__ import annotations

from pathlib import Path

from kvbake.ship.core.serve_logs import MAX_CHARS, message_of, telling_line

LOGS = Path(__file__).resolve().parents[1] / "data" / "serve_logs"


def test_a_switch_refused_in_a_worker_is_named_not_the_engine_core_wrapper() -> None:
    log = (LOGS / "vllm_0.32.0_switch_refused.log").read_text()
    assert log.splitlines()[-1].startswith("RuntimeError: Engine core initialization failed. See root cause above.")
    assert telling_line(log) == "ValueError: VLLM_KVBAKE_PACK_FACTOR must be an integer of at least 2 (or unset), got '1'"


def test_a_refused_max_model_len_names_the_value_error_shortened() -> None:
    line = telling_line((LOGS / "vllm_0.32.0_max_model_len_too_long.log").read_text())
    assert line.startswith("Value error, User-specified max_model_len (16384) is greater than the derived max_model_len")
    assert len(line) == MAX_CHARS and line.endswith("…")


def test_a_warning_that_mentions_an_error_is_not_a_cause() -> None:
    log = ("(APIServer pid=1) WARNING 12-02 03:59:50 [system_utils.py:255] Found ulimit of 20000. This can cause fd limit "
           "errors like `OSError: [Errno 24] Too many open files`.\nKilled\n")
    assert telling_line(log) == "Killed"


def test_without_an_exception_the_last_line_is_shown() -> None:
    assert telling_line("starting\nserving on 0.0.0.0:8000\n\n") == "serving on 0.0.0.0:8000"
    assert telling_line("") == "no output"


def test_process_tags_and_logger_headers_are_dropped() -> None:
    assert message_of("(Worker pid=37) ERROR 12-02 04:00:39 [multiproc_executor.py:953] ValueError: x") == "ValueError: x"


def test_a_line_of_exactly_the_limit_is_kept_whole_and_one_more_character_is_cut() -> None:
    exact = "ValueError: " + "x" * (MAX_CHARS - len("ValueError: "))
    assert telling_line(exact) == exact
    longer = telling_line(exact + "y")
    assert len(longer) == MAX_CHARS and longer == exact[: MAX_CHARS - 1] + "…"
