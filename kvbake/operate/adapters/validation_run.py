"""Adapter: runs the supervised test plan against an endpoint under the memory watcher, then writes the report."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kvbake.atomicfile import write_atomic
from kvbake.deployfile import Deployment
from kvbake.engines.adapters.client import Engine
from kvbake.errors import KvbakeError, RolloutError, UsageError, ValidationStop
from kvbake.manifest import Manifest
from kvbake.operate.adapters.memwatch import GIB, DEFAULT_MEMINFO, MemoryWatcher, NodeMemoryReader, Reader
from kvbake.operate.adapters.openai_client import DEFAULT_TIMEOUT_S, Completion, CompletionRequest, OpenAIClient
from kvbake.operate.core.corpus import Corpus, estimate_tokens, load_corpus
from kvbake.operate.core.identity_oracle import score_identity_set, score_needles_identity
from kvbake.kvarith.forced_pressure import Pool, PressurePlan, plan_pressure, required_max_tokens
from kvbake.operate.core.needle import NeedlePrompt, build_corruption_set, build_needle_prompt, build_sized_set, make_needle_codes
from kvbake.operate.core.pressure_mix import (
    CACHE_INFO, SIZING_ROUNDS, forced_admission, limits_from_args, next_sizes, pool_from_args, pool_from_metrics, proof,
    summary_tail,
)
from kvbake.operate.core.html_validate import Reading, validate_html
from kvbake.operate.core.oracle import OracleChoice, build_probe, choose_oracle, initial_choice, probe_data
from kvbake.operate.core.prefix_identity import Observation, PrefixObservations, PrefixPrompts, build_prefix_prompts, shared_prefix_length
from kvbake.serve.core.presets import ChosenPreset
from kvbake.operate.core.serve_metrics import PREEMPTIONS, counter_total, preemptions_during, with_preemptions
from kvbake.secretscan import refuse_in_option, withhold_credentials
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.operate.core.validate_plan import (
    ANSWER_TOKENS, INERTNESS_RUNS, STEPS, SYNTHETIC, PlanOptions, Report, StepResult, make_options, not_run,
    report_text, report_to_dict, score_inertness, score_needle_set, score_needles, score_prefix, stopped, synthetic_corpus,
)

REPORTS_DIR = ".kvbake/validate"
POOL_TOO_LARGE = ("lower the KV pool for the window (--kv-cache-memory-bytes or --num-gpu-blocks-override in the preset), "
                  "or pass --pressure N --pressure-tokens T (scripts/kv_arith.py --pressure predicts them)")


@dataclass(frozen=True)
class ValidateRequest:
    """Everything one `validate` run needs, as the command line gave it."""

    manifest: Manifest
    chosen: ChosenPreset
    endpoint: str
    model: str | None = None
    corpus_dir: Path | None = None
    deployment: Deployment | None = None
    depths: tuple[int, ...] | None = None
    prefix_tokens: int = 8000
    corruption_tokens: int = 8000
    pressure: int | str = 0  # a count, or "auto": derived from the serve's KV pool
    pressure_tokens: int | None = None
    seed: str = "kvbake"
    mem_floor_gib: float = 1.5
    mem_interval_s: float = 5.0
    meminfo_path: str = DEFAULT_MEMINFO
    timeout_s: float = DEFAULT_TIMEOUT_S  # per request; a request that takes longer stops the run
    oracle: str = "auto"  # auto (the recall probe chooses), recall or identity
    api_key: str | None = field(default=None, repr=False)  # the serve's API key, sent as a Bearer token, written nowhere


def _complete(client: OpenAIClient, prompt: str, salt: str) -> Completion:
    return client.complete(CompletionRequest(prompt, ANSWER_TOKENS, salt))


def _observe(completion: Completion) -> Observation:
    return Observation(completion.prompt_tokens, completion.cached_tokens, completion.text)


class PlanRun:
    """The five steps against one client; the inertness outputs become the prefix step's uncached controls."""

    def __init__(self, client: OpenAIClient, options: PlanOptions, corpus: Corpus) -> None:
        self.client, self.options, self.corpus = client, options, corpus
        self.prompts: PrefixPrompts = build_prefix_prompts(corpus, options.prefix_tokens, options.prefix_tokens // 2)
        self.controls: tuple[str, ...] = ()
        self.model: str | None = None
        self.oracle: OracleChoice = initial_choice(options.oracle)

    @property
    def identity(self) -> bool:
        return self.oracle.used == "identity"

    def inertness(self) -> StepResult:
        self.model = self.client.resolve_model()
        runs = [_complete(self.client, self.prompts.full, self.options.salt(f"inert-{i}")) for i in range(INERTNESS_RUNS)]
        self.controls = tuple(c.text for c in runs)
        result = score_inertness(runs, self.options.control)
        return self.recall_probe(result) if result.passed and self.oracle.used is None else result

    def recall_probe(self, result: StepResult) -> StepResult:
        """Auto's one short request, once the first step's own checks passed: its answer chooses the oracle."""
        probe = build_probe(self.corpus, self.options.seed)
        answer = _complete(self.client, probe.text, self.options.salt("recall-probe"))
        self.oracle = choose_oracle(probe, answer)
        return dataclasses.replace(result, data={**result.data, "recall_probe": probe_data(probe, answer, self.oracle)})

    def prefix(self) -> StepResult:
        o, full, partial = self.options, self.prompts.full, self.prompts.partial
        cold, hit = _complete(self.client, full, o.salt("prefix")), _complete(self.client, full, o.salt("prefix"))
        fresh = _complete(self.client, full, o.salt("prefix-fresh"))
        shared = shared_prefix_length(self.client.tokenize(full), self.client.tokenize(partial))
        part, part_control = _complete(self.client, partial, o.salt("prefix")), _complete(self.client, partial, o.salt("partial-fresh"))
        return score_prefix(PrefixObservations(_observe(cold), _observe(hit), _observe(fresh), _observe(part), _observe(part_control),
                                               shared, self.controls, o.preset.prefix_block))

    def check_fits(self, what: str, prompts: Sequence[str]) -> None:
        """Measure prompts with the server's tokenizer: the estimate sized them, only the server knows their length."""
        max_len = self.options.preset.max_model_len
        longest, text = max((len(self.client.tokenize(p)), p) for p in prompts)
        if longest > max_len - ANSWER_TOKENS:
            raise ValidationStop(f"the {what} prompt is {longest} tokens by the server's tokenizer ({estimate_tokens(text)} "
                                 f"estimated), over max-model-len {max_len} less {ANSWER_TOKENS} for the answer",
                                 "pass smaller --depths, --corruption-tokens or --pressure-tokens: the 4-character "
                                 "estimate undercounts this model's tokenizer")

    def needle_set(self, name: str, tokens: int, size: int) -> StepResult:
        prompts = build_corruption_set(self.corpus, tokens, f"{self.options.seed}:{name}", size=size)
        self.check_fits(name, [p.text for p in prompts])
        return self.send_set(name, prompts, ANSWER_TOKENS)

    def send_set(self, name: str, prompts: Sequence[NeedlePrompt], max_tokens: int, ignore_eos: bool = False) -> StepResult:
        """The prompts together, each under its own salt; under the identity oracle then each alone, as it was sent."""
        def request(i: int, prompt: NeedlePrompt, label: str) -> CompletionRequest:
            return CompletionRequest(prompt.text, max_tokens, self.options.salt(f"{label}-{i}"), ignore_eos)

        concurrent = self.client.complete_many([request(i, p, name) for i, p in enumerate(prompts)], max_workers=len(prompts))
        if not self.identity:
            return score_needle_set(name, prompts, concurrent)
        solo = [self.client.complete(request(i, p, f"{name}-solo")) for i, p in enumerate(prompts)]
        return score_identity_set(name, prompts, concurrent, solo)

    def needles(self) -> StepResult:
        o = self.options
        codes = make_needle_codes(f"{o.seed}:needles", len(o.depths))
        prompt = build_needle_prompt(self.corpus, o.needle_tokens, o.depths, codes, start=3)
        self.check_fits("needle", [prompt.text])
        cold = _complete(self.client, prompt.text, o.salt("needles"))
        if not self.identity:
            return score_needles(prompt, cold)
        hit = _complete(self.client, prompt.text, o.salt("needles"))  # the same salt: a prefix-cache hit
        fresh = _complete(self.client, prompt.text, o.salt("needles-fresh"))
        return score_needles_identity(prompt, cold, hit, fresh, o.preset.prefix_block)

    def pressure(self) -> StepResult:
        """Concurrent long requests over the pool, with the preemptions the serve counted meanwhile."""
        before = self.preemption_count()
        o = self.options
        result = self.forced_pressure() if o.pressure_auto else self.needle_set(STEPS[4], o.pressure_tokens, o.pressure)
        return with_preemptions(result, preemptions_during(before, self.preemption_count()))

    def forced_pressure(self) -> StepResult:
        """Requests derived from the serve's KV pool: those vLLM admits together outgrow it before any can finish."""
        preset = self.options.preset
        pool, source = self.kv_pool()
        limits = limits_from_args(preset.launcher_args, pool)
        plan = plan_pressure(pool, preset.max_model_len, limits)
        if plan is None:
            raise ValidationStop(f"no request mix within max-model-len {preset.max_model_len} can outgrow a KV pool of {pool.blocks} "
                                 f"blocks of {pool.block_size} tokens before its first request finishes", POOL_TOO_LARGE)
        prompts, lengths = self.sized_prompts(plan)
        max_tokens = required_max_tokens(pool, lengths, preset.max_model_len, limits)
        if max_tokens is None:
            raise ValidationStop(f"the {len(lengths)} pressure prompts measure {min(lengths)} to {max(lengths)} tokens by the server's "
                                 f"tokenizer, and no max_tokens within max-model-len {preset.max_model_len} makes them outgrow the "
                                 f"KV pool of {pool.blocks} blocks", POOL_TOO_LARGE)
        found = forced_admission(pool, lengths, max_tokens, limits)
        result = self.send_set(STEPS[4], prompts, max_tokens, ignore_eos=True)
        return dataclasses.replace(result, summary=result.summary + summary_tail(found, pool),
                                   data={**result.data, "derivation": proof(found, pool, limits, source)})

    def kv_pool(self) -> tuple[Pool, str]:
        """The pool vLLM reports in /metrics, else the one the preset fixes with --num-gpu-blocks-override."""
        text = self.client.metrics_text()
        pool = pool_from_metrics(text) if text is not None else None
        if pool is not None:
            return pool, CACHE_INFO
        pool = pool_from_args(self.options.preset.launcher_args)
        if pool is not None:
            return pool, "--num-gpu-blocks-override"
        raise ValidationStop(f"--pressure auto needs the KV pool: the serve's /metrics has no {CACHE_INFO} and the preset sets no "
                             "--num-gpu-blocks-override with --block-size",
                             "give the preset --num-gpu-blocks-override and --block-size, or pass --pressure N --pressure-tokens T "
                             "(scripts/kv_arith.py --pressure predicts them)")

    def sized_prompts(self, plan: PressurePlan) -> tuple[tuple[NeedlePrompt, ...], tuple[int, ...]]:
        """The plan's prompts, measured with the server's tokenizer and resized until each fills the target's blocks."""
        sizes: tuple[int, ...] = (plan.prompt_tokens,) * plan.requests
        for _ in range(SIZING_ROUNDS):
            prompts = build_sized_set(self.corpus, sizes, f"{self.options.seed}:{STEPS[4]}")
            lengths = tuple(len(self.client.tokenize(p.text)) for p in prompts)
            resized = next_sizes(sizes, lengths, plan.prompt_tokens, plan.pool.block_size)
            if resized is None:
                break
            sizes = resized
        return prompts, lengths

    def preemption_count(self) -> float | None:
        text = self.client.metrics_text()
        return None if text is None else counter_total(text, PREEMPTIONS)

    def steps(self) -> tuple[tuple[str, Callable[[], StepResult] | None], ...]:
        o = self.options
        pressure = self.pressure if o.runs_pressure else None
        return ((STEPS[0] if o.control else "baseline", self.inertness), (STEPS[1], self.prefix),
                (STEPS[2], lambda: self.needle_set(STEPS[2], o.corruption_tokens, 16)), (STEPS[3], self.needles),
                (STEPS[4], pressure))


def run_steps(run: PlanRun, watcher: MemoryWatcher) -> tuple[StepResult, ...]:
    """Every step in order under the watcher (sampled before and after each); the first stop skips the rest."""
    results: list[StepResult] = []
    for name, action in run.steps():
        if any(r.stop for r in results) or action is None:
            why = "not run: the run stopped earlier" if action else "skipped (pass --pressure auto to force pool pressure)"
            results.append(not_run(name, why))
            continue
        try:
            watcher.sample()
            result = action()
            watcher.sample()
        except Exception as err:  # noqa: BLE001 - a watcher breach closes the client, which fails the request in flight
            cause = watcher.stop_reason or err
            if not isinstance(cause, ValidationStop):  # a serve that refuses the API key (UsageError): nothing is judged
                raise
            result = stopped(name, cause.message, cause.fix)
        results.append(result)
    return tuple(results)


def release_of(deployment: Deployment | None) -> dict[str, Any]:
    """The head node's current release record, which the report is tied to."""
    if deployment is None:
        return {"id": None, "text": "no release record (no --deploy given)"}
    head = next((n for n in deployment.nodes if n.role == "head"), deployment.nodes[0])
    current = NodeState(head.name, Engine(head.host)).read().current
    if current is None:
        return {"id": None, "node": head.name, "text": f"no release record on {head.name}"}
    return {"id": current.id, "node": head.name, "preset": current.preset, "image": current.image,
            "switches": dict(current.switches), "max_model_len": current.max_model_len,
            "text": f"release {current.id} ({current.preset}) on {head.name}"}


def check_release(release: Mapping[str, Any], preset: str) -> None:
    """Refuse to validate a preset the head node does not run."""
    if release.get("preset") not in (None, preset):
        raise ValidationStop(f"{release['node']} runs release {release['id']} with preset {release['preset']}, not {preset}",
                             f"validate --preset {release['preset']}, or deploy {preset} first")


def memory_reader(request: ValidateRequest) -> Reader:
    """Every node of the deployment, read inside its serving container; nothing to read without --deploy."""
    if request.deployment is None:
        return lambda: ()
    nodes = [(n.name, Engine(n.host)) for n in request.deployment.nodes]
    return NodeMemoryReader(nodes, request.deployment.launcher.container, request.meminfo_path)


def _corpus(request: ValidateRequest) -> tuple[Corpus, str]:
    if request.corpus_dir is None:
        return synthetic_corpus(), SYNTHETIC
    corpus = load_corpus(request.corpus_dir)
    return corpus, f"{request.corpus_dir.name}: {len(corpus.documents)} records"


def _roll_back(rollback: Callable[[], str] | None) -> tuple[str, KvbakeError | None]:
    if rollback is None:
        return "not requested (pass --rollback-on-failure with --deploy)", None
    try:
        return f"done: {rollback()}", None
    except KvbakeError as err:
        return f"failed: {err.one_line()}", err


API_KEY_ENV = "VLLM_API_KEY"  # the variable vLLM itself reads its --api-key from
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def api_key_of(name: str, deployment: Deployment | None, env: Mapping[str, str] = os.environ) -> str | None:
    """The serve's API key, by name from the environment kvbake runs in, as the launcher gives it to the serve; None
    when unset. A deployment whose serve takes its key from that variable (launcher.env SECRET_ENV) refuses a run
    without it: every request would be refused (HTTP 401), and a stop for that reason must not roll the window back."""
    if not ENV_NAME.match(name):
        raise UsageError(f"--api-key-env {name!r} is not a variable name", "give the name of the variable that holds the key, e.g. VLLM_API_KEY")
    if env.get(name):
        return env[name]
    needed = json.loads((deployment.launcher.env.get("SECRET_ENV") or "[]")) if deployment is not None else []
    if name in needed:
        raise UsageError(f"the serve takes its API key from {name} (the deployment's SECRET_ENV), which is not set where kvbake runs",
                         f"export {name} with the serve's key (kvbake sends it to the endpoint only), then run validate again; "
                         "nothing was sent")
    return None


def check_written_options(endpoint: str, model: str | None) -> None:
    """The endpoint and the model id are written into the report: neither may carry a credential (nothing is sent)."""
    for option, text in (("--endpoint", endpoint), ("--model", model)):
        refuse_in_option(option, text, "the validation report", f"give {option} without it (the plan sends no credentials); "
                         "nothing was sent or written")


def run_validation(request: ValidateRequest, rollback: Callable[[], str] | None = None,
                   reader: Reader | None = None) -> tuple[Report, Path]:
    """Run the plan, write the report; a stop (after the optional rollback) raises ValidationStop naming the report."""
    check_written_options(request.endpoint, request.model)
    release = release_of(request.deployment)
    check_release(release, request.chosen.preset.name)
    wait_for_the_serve(request.deployment)
    started = _now()
    options = make_options(request.chosen.preset, f"kvbake-{started}-{secrets.token_hex(4)}",
                           request.seed, request.depths, request.prefix_tokens, request.corruption_tokens,
                           request.pressure, request.pressure_tokens, request.oracle)
    corpus, corpus_label = _corpus(request)
    with OpenAIClient(request.endpoint, request.model, request.timeout_s, api_key=request.api_key) as client:
        watcher = MemoryWatcher(reader or memory_reader(request), int(request.mem_floor_gib * GIB),
                                request.mem_interval_s, on_breach=client.close)
        plan = PlanRun(client, options, corpus)
        with watcher:
            steps = run_steps(plan, watcher)
    stop = next((s for s in steps if s.stop), None)
    rollback_text, rollback_error = _roll_back(rollback) if stop else ("not needed", None)
    report = Report(request.chosen, request.endpoint, plan.model, release, corpus_label, started, _now(), steps,
                    watcher_summary(watcher, request.deployment is not None), rollback_text, plan.oracle)
    path = write_report(request.manifest.root / REPORTS_DIR, report, tuple(watcher.readings))
    where = path.relative_to(request.manifest.root).with_suffix(".txt")
    if rollback_error is not None:
        raise type(rollback_error)(f"validation stopped ({stop.name}: {stop.stop}) and the rollback failed: {rollback_error.message}; "
                                   f"report {where}", rollback_error.fix)
    if stop is not None:
        raise ValidationStop(f"{stop.name}: {stop.stop}; report {where}", stop.fix)
    return report, path


def wait_for_the_serve(deployment: Deployment | None) -> None:
    """With a deployment that names a readiness probe, the plan starts only once the serve answers it."""
    if deployment is None or deployment.readiness is None:
        return
    from kvbake.ship.adapters.readiness import wait_until_ready

    try:
        wait_until_ready(deployment.readiness, lambda: None)
    except RolloutError as err:
        raise ValidationStop(f"not started: {err.message}", "deploy the preset (python build.py deploy) and validate once it is ready") from None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_report(folder: Path, report: Report, readings: Sequence[Reading] = ()) -> Path:
    """Write <timestamp>-<preset>.json, .txt and .html (a -N suffix when that name is taken); return the JSON path. The
    page charts `readings`, the watcher's memory samples. A string that looks like a credential (a serve's answer, say)
    is written as a note of what was withheld: the report is kept."""
    report = withhold_credentials(report)
    folder.mkdir(parents=True, exist_ok=True)
    stem, number = report.name, 1
    while (folder / f"{stem}.json").exists():
        number += 1
        stem = f"{report.name}-{number}"
    write_atomic(folder / f"{stem}.txt", report_text(report).encode())
    write_atomic(folder / f"{stem}.html", validate_html(report_to_dict(report), readings).encode())
    path = folder / f"{stem}.json"
    write_atomic(path, (json.dumps(report_to_dict(report), indent=1, sort_keys=True) + "\n").encode())
    return path


def watcher_summary(watcher: MemoryWatcher, watched: bool) -> dict[str, Any]:
    return {"watched": watched, "floor_bytes": watcher.floor, "samples": watcher.samples,
            "lowest_bytes": dict(sorted(watcher.lowest.items()))}
