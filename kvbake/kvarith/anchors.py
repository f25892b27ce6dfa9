"""Self-test anchors: figures the arithmetic must reproduce exactly, each checked independently."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvbake.kvarith.capacity import GIB, ServeSettings, compute_capacity, solve_tokens
from kvbake.kvarith.config import parse_config
from kvbake.kvarith.examples import v4_flash_config, v41_flash_config
from kvbake.kvarith.planner import Layout, approximate_gcd, plan_layout
from kvbake.kvarith.specs import SpecOptions, build_layer_specs

PUBLISHED_N = 46_603  # floor(10 GiB / 230,400 B)
PUBLISHED = ((327_680, 9_515, 1_604_926, "4.90"), (327_680, 6_102, 2_502_600, "7.64"),
             (524_288, 8_662, 2_820_756, "5.38"))


@dataclass(frozen=True)
class AnchorResult:
    """One anchor: what was expected, what came out."""

    name: str
    expected: object
    actual: object

    @property
    def ok(self) -> bool:
        return self.expected == self.actual


def _layout(family: str) -> Layout:
    config = v41_flash_config() if family == "v41" else v4_flash_config()
    return plan_layout(build_layer_specs(parse_config(config), SpecOptions()))


def _pages(family: str) -> dict[str, int]:
    config = v41_flash_config() if family == "v41" else v4_flash_config()
    seen: dict[str, int] = {}
    for spec in build_layer_specs(parse_config(config), SpecOptions()):
        seen.setdefault(spec.role, spec.page_bytes)
    return seen


def _group_shape(layout: Layout) -> list[tuple[str, int]]:
    return [(g.bucket, len(g.layers)) for g in layout.groups]


def _r(family: str, max_model_len: int, in_flight: int) -> int:
    settings = ServeSettings(max_model_len, in_flight // 2, 2)
    return compute_capacity(_layout(family), settings, num_blocks=PUBLISHED_N).blocks_per_request


def _refused(family: str, max_model_len: int, in_flight: int, pool: int) -> bool:
    settings = ServeSettings(max_model_len, in_flight // 2, 2)
    return not compute_capacity(_layout(family), settings, pools=(pool,)).fits


def _published(n: int, r: int, length: int) -> tuple[int, str]:
    return int(n / r * length), f"{n / r:.2f}"


def anchor_checks() -> list[tuple[str, object, Callable[[], object]]]:
    """(name, expected, how to compute it) for every anchor."""
    checks: list[tuple[str, object, Callable[[], object]]] = [
        ("V4.1 pages", {"swa": 19_008, "r2_kv": 37_440, "r1_kv": 74_880, "r2_indexer_k": 8_640,
                        "r1_indexer_k": 17_280, "ring": 32_768}, lambda: _pages("v41")),
        ("V4.1 stride", 230_400, lambda: _layout("v41").stride),
        ("V4.1 groups 4x10 SWA, 8 MLA, 3 ring",
         [("swa", 10)] * 4 + [("mla", 8), ("ring", 3)], lambda: _group_shape(_layout("v41"))),
        ("V4.1 R(327,680) at 4,096 in flight", 3_093, lambda: _r("v41", 327_680, 4_096)),
        ("V4.1 R(327,680) at 16,384 in flight", 4_629, lambda: _r("v41", 327_680, 16_384)),
        ("V4 pages", {"swa": 37_440, "c4_kv": 37_440, "c128_kv": 1_728, "c4_indexer_k": 8_640,
                      "c4_state": 32_832, "c4_indexer_state": 8_640, "c128_state": 32_832}, lambda: _pages("v4")),
        ("approximate_gcd([43, 21, 20], 21)", 22, lambda: approximate_gcd([43, 21, 20], 21)),
        ("V4 repeats_per_group", 22, lambda: _layout("v4").repeats_per_group),
        ("V4 stride", 1_002_240, lambda: _layout("v4").stride),
        ("V4 group count", 5, lambda: len(_layout("v4").groups)),
        ("V4 R(327,680) at 4,096 in flight", 2_970, lambda: _r("v4", 327_680, 4_096)),
        ("10 GiB / 230,400 B", PUBLISHED_N, lambda: 10 * GIB // 230_400),
        ("V4 refused at 327,680, 16,384 in flight, 7.25 GiB", True,
         lambda: _refused("v4", 327_680, 16_384, int(7.25 * GIB))),
        ("V4.1 starts at 327,680, 4,096 in flight, 10 GiB", False,
         lambda: _refused("v41", 327_680, 4_096, 10 * GIB)),
        ("--solve-tokens 1604926 with stock V4.1 arithmetic finds no N", (),
         lambda: solve_tokens(1_604_926, _r("v41", 327_680, 4_096), 327_680)),
    ]
    for length, r, tokens, ratio in PUBLISHED:
        checks.append((f"published N={PUBLISHED_N:,}, R={r:,} at {length:,}", (tokens, ratio),
                       lambda r=r, length=length: _published(PUBLISHED_N, r, length)))
    return checks


def run_anchors() -> list[AnchorResult]:
    """Evaluate every anchor; a failing computation counts as a miss, it never stops the others."""
    results = []
    for name, expected, compute in anchor_checks():
        try:
            actual = compute()
        except Exception as err:  # noqa: BLE001 - a self-test reports every miss, whatever raised it
            actual = f"raised {type(err).__name__}: {err}"
        results.append(AnchorResult(name, expected, actual))
    return results
