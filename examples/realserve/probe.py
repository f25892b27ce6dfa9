"""Start the serving stand-in on loopback, wait for health, run temperature-0 completions, report the KV capacity."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

DEFAULT_IMAGE = "kvbake-standin/vllm-cpu-base:0.32.0"
MODEL_MOUNT = "/models/tiny"
CAPACITY_LINE = re.compile(r"\S+ KV cache size: [\d,]+ tokens, Maximum concurrency for [\d,]+ tokens per request: \S+")
UNKNOWN_ENV = re.compile(r"Unknown vLLM environment variable detected: (\S+)")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, required=True, help="the tiny model folder (scripts/tiny_model.py)")
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--name", default="kvbake-realserve-probe", help="container name")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="container environment")
    parser.add_argument("--kv-cache-memory-bytes", type=int, default=None)
    parser.add_argument("--prompt-words", type=int, default=1000, help="length of the long prompt")
    parser.add_argument("--shared-words", type=int, default=600, help="prefix the second prompt shares")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for /health")
    parser.add_argument("--eager", action="store_true",
                        help="--enforce-eager: no torch.compile warm-up (much faster to ready on 2 cores)")
    parser.add_argument("--log-file", type=Path, default=None, help="write the container's whole log here")
    parser.add_argument("--prefix-check", action="store_true",
                        help="also send the long prompt cold, repeated, with a fresh cache_salt and half-shared")
    return parser.parse_args(argv)


def vocabulary(model_dir: Path) -> list[str]:
    """The model's ordinary words (special tokens left out), in id order."""
    vocab = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    return [word for word, _ in sorted(vocab.items(), key=lambda item: item[1]) if not word.startswith("<")]


def prompt_words(words: list[str], count: int, stride: int) -> list[str]:
    """count words picked from the vocabulary with a fixed stride (deterministic, little repetition)."""
    return [words[(index * stride) % len(words)] for index in range(count)]


def server_command(args: argparse.Namespace) -> list[str]:
    """The api_server command line (the `vllm` console script does not work for the vllm-cpu distribution)."""
    command = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL_MOUNT,
               "--host", "127.0.0.1", "--port", str(args.port), "--max-model-len", "4096", "--block-size", "128",
               "--enable-prefix-caching", "--enable-prompt-tokens-details"]
    if args.kv_cache_memory_bytes is not None:
        command += ["--kv-cache-memory-bytes", str(args.kv_cache_memory_bytes)]
    if args.eager:
        command.append("--enforce-eager")
    return command


def start(docker: DockerClient, args: argparse.Namespace) -> None:
    """Run the serving container detached on the host network, the model mounted read-only."""
    envs = {"HF_HUB_OFFLINE": "1", **dict(item.split("=", 1) for item in args.env)}
    docker.run(args.image, server_command(args), name=args.name, detach=True, networks=["host"],
               shm_size="1g", envs=envs, volumes=[(str(args.model.resolve()), MODEL_MOUNT, "ro")], pull="never")


def wait_ready(docker: DockerClient, args: argparse.Namespace, client: httpx.Client) -> float:
    """Seconds until /health answers 200; an error if the container exits or the timeout passes."""
    started = time.monotonic()
    while time.monotonic() - started < args.timeout:
        try:
            if client.get("/health").status_code == 200:
                return round(time.monotonic() - started, 1)
        except httpx.TransportError:
            pass
        if not docker.container.inspect(args.name).state.running:
            raise RuntimeError(f"{args.name} exited before it was ready; see its log above")
        time.sleep(1)
    raise RuntimeError(f"{args.name} not ready after {args.timeout:.0f}s")


def complete(client: httpx.Client, prompt: str, max_tokens: int, salt: str | None = None) -> dict[str, object]:
    """One temperature-0 completion: its text, token ids and cached prompt tokens."""
    body = {"model": MODEL_MOUNT, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}
    if salt is not None:
        body["cache_salt"] = salt
    answer = client.post("/v1/completions", json=body, timeout=300).raise_for_status().json()
    choice, usage = answer["choices"][0], answer["usage"]
    details = usage.get("prompt_tokens_details") or {}
    return {"text": choice["text"], "token_ids": choice.get("token_ids"), "prompt_tokens": usage["prompt_tokens"],
            "cached_tokens": details.get("cached_tokens")}


def prefix_runs(client: httpx.Client, words: list[str], args: argparse.Namespace) -> dict[str, object]:
    """Cold, repeated, salted and half-shared runs of the long prompt, and whether the outputs agree."""
    long_prompt = " ".join(prompt_words(words, args.prompt_words, 7))
    shared = prompt_words(words, args.shared_words, 7) + prompt_words(words, args.prompt_words - args.shared_words, 11)
    runs = {"cold": complete(client, long_prompt, args.max_tokens),
            "repeat": complete(client, long_prompt, args.max_tokens),
            "salted": complete(client, long_prompt, args.max_tokens, salt="fresh-salt"),
            "shared": complete(client, " ".join(shared), args.max_tokens)}
    runs["repeat_equals_cold"] = runs["repeat"]["token_ids"] == runs["cold"]["token_ids"]
    runs["salted_equals_cold"] = runs["salted"]["token_ids"] == runs["cold"]["token_ids"]
    return runs


def log_facts(docker: DockerClient, name: str) -> dict[str, object]:
    """The capacity line and any unknown-variable warnings from the container's log."""
    log = docker.container.logs(name)
    capacity = CAPACITY_LINE.search(log)
    return {"capacity_line": capacity.group(0) if capacity else None, "unknown_env": UNKNOWN_ENV.findall(log),
            "explicit_kv": re.findall(r"(?:Explicitly|Auto) set \([^)]*\) GiB for KV cache[^\n]*", log)}


def root_cause(log: str) -> str:
    """The log's error lines without traceback frames, last 30."""
    wanted = [line for line in log.splitlines() if re.search(r"Error|ERROR|Exception", line)
              and not line.lstrip().startswith(("File ", "^"))]
    return "\n".join(wanted[-30:])


def probe(docker: DockerClient, args: argparse.Namespace) -> dict[str, object]:
    """Start, wait, complete, read the log; the container is removed whatever happens."""
    start(docker, args)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{args.port}") as client:
            result: dict[str, object] = {"ready_s": wait_ready(docker, args, client)}
            words = vocabulary(args.model)
            result["short"] = complete(client, " ".join(prompt_words(words, 12, 5)), args.max_tokens)
            if args.prefix_check:
                result["prefix"] = prefix_runs(client, words, args)
        result.update(log_facts(docker, args.name))
        return result
    except (RuntimeError, httpx.HTTPError):
        print(root_cause(docker.container.logs(args.name)), file=sys.stderr)
        raise
    finally:
        if args.log_file is not None:
            args.log_file.write_text(docker.container.logs(args.name))
        docker.container.remove(args.name, force=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the probe and print its result as JSON."""
    args = parse_args(argv)
    try:
        result = probe(DockerClient(), args)
    except (RuntimeError, httpx.HTTPError, DockerException) as err:
        print(f"error: {' '.join(str(err).split())[:400]}; fix: read the container log above", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
