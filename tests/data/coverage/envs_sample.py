# A cut-down vllm/envs.py for the switch-coverage tests: each registration form once.
import os
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    VLLM_PLAIN: bool = False
    VLLM_TYPED_ONLY: int = 0


def env_with_choices(env_name: str, default: str | None, choices: list[str]) -> Callable[[], str | None]:
    return lambda: os.getenv(env_name, default)


_helper = env_with_choices("VLLM_HELPER_ONLY", None, ["a"])

environment_variables: dict[str, Callable[[], Any]] = {
    "VLLM_PLAIN": lambda: bool(int(os.getenv("VLLM_PLAIN", "0"))),
    "VLLM_CHOICES": env_with_choices("VLLM_CHOICES", None, ["1", "2"]),
    "VLLM_SPLIT_KEY":
    lambda: os.environ.get("VLLM_SPLIT_KEY", "x"),
    "lower_case_key": lambda: None,
}
environment_variables["VLLM_LATE"] = lambda: os.getenv("VLLM_LATE")


def compile_factors() -> dict[str, object]:
    return {"used": os.environ.get("VLLM_USED_OUTSIDE")}
