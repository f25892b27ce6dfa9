"""Generate the tiny random-weight Llama and its word-level tokenizer deterministically, inside the serving base."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

# Only the standard library at module level: `generate` runs inside the image, which has no python-on-whales.
SCRIPT = Path(__file__).resolve()
DEFAULT_IMAGE = "kvbake-standin/vllm-cpu-base:0.32.0"
DEFAULT_CACHE_DIR = Path("~/.cache/kvbake/models")
MOUNT_POINT = "/kvbake-scripts"
GENERATOR_VERSION = 1  # bump when generate() changes what it writes
SEED = 20260101
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
# head_dim 64: the CPU attention backend refuses 16. Large initializer range: peaked logits, stable greedy tokens.
MODEL_SPEC: dict[str, object] = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "initializer_range": 0.25,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "dtype": "float32",
}


def words() -> list[str]:
    """The corpus vocabulary: two-syllable pseudo-words, in a fixed order."""
    syllables = [c + v for c in CONSONANTS for v in VOWELS]
    every = [first + second for first in syllables for second in syllables]
    return every[: int(MODEL_SPEC["vocab_size"]) - len(SPECIAL_TOKENS)]


def train_tokenizer():  # noqa: ANN201 - tokenizers is only importable inside the image
    """A word-level tokenizer trained on a corpus that holds every pseudo-word once."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token=SPECIAL_TOKENS[0]))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(vocab_size=int(MODEL_SPEC["vocab_size"]), min_frequency=1,
                                        special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    vocabulary = words()
    lines = [" ".join(vocabulary[start:start + 16]) for start in range(0, len(vocabulary), 16)]
    tokenizer.train_from_iterator(lines, trainer=trainer)
    return tokenizer


def generate(out: Path) -> None:
    """Write config, random weights (fixed seed) and the tokenizer into out (run inside the image)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(SEED)
    model = LlamaForCausalLM(LlamaConfig(**MODEL_SPEC))
    model.save_pretrained(out)
    unk, bos, eos = SPECIAL_TOKENS
    wrapped = PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(), unk_token=unk, bos_token=bos,
                                      eos_token=eos, model_max_length=int(MODEL_SPEC["max_position_embeddings"]))
    wrapped.save_pretrained(out)


CORPUS_FILES = ("opinions_cl.jsonl", "filings_recap.jsonl")  # the names kvbake's validate reads
CORPUS_RECORDS, CORPUS_WORDS = 24, 600


def corpus_text(file_name: str, record: int) -> str:
    """One record: pseudo-words of the model's own vocabulary, chosen by hash, so every prompt token is a known id."""
    vocabulary = words()
    picks = (hashlib.sha256(f"kvbake-tiny-corpus:{file_name}:{record}:{i}".encode()).digest() for i in range(CORPUS_WORDS))
    return " ".join(vocabulary[int.from_bytes(digest[:4], "big") % len(vocabulary)] for digest in picks)


def write_corpus(folder: Path) -> None:
    """The validation corpus for the tiny model (the files `validate --corpus` reads); the same bytes on every run."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in CORPUS_FILES:
        lines = (json.dumps({"text": corpus_text(name, record)}) + "\n" for record in range(CORPUS_RECORDS))
        (folder / name).write_text("".join(lines))


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under folder, by relative path."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def spec_key(image_inputs: str) -> str:
    """A short hash of everything the model's bytes depend on: the generator's inputs and the image's packages."""
    inputs = {"generator": GENERATOR_VERSION, "seed": SEED, "spec": MODEL_SPEC, "special": SPECIAL_TOKENS,
              "consonants": CONSONANTS, "vowels": VOWELS, "image": image_inputs}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]


def sums_path(model_dir: Path) -> Path:
    """The file beside a model folder that records the sha256 of each of its files."""
    return model_dir.with_name(model_dir.name + ".sha256.json")


def generate_in_image(docker, image: str, out: Path) -> None:  # noqa: ANN001 - python-on-whales client
    """Run `generate` in the image with no network; the model lands in out."""
    out.mkdir(parents=True)
    docker.run(image, ["python3", f"{MOUNT_POINT}/{SCRIPT.name}", "generate", "/out"],
               volumes=[(str(SCRIPT.parent), MOUNT_POINT, "ro"), (str(out), "/out")],
               envs={"HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"},
               networks=["none"], remove=True, pull="never")


def image_inputs(docker, image: str) -> str:  # noqa: ANN001 - python-on-whales client
    """The image's package identity (its requirements label), or an error naming the build script."""
    from kvbake.errors import BaseImageError

    if not docker.image.exists(image):
        raise BaseImageError(f"{image} is not present locally", fix="run scripts/standin_vllm_base.py first")
    labels = docker.image.inspect(image).config.labels or {}
    return labels.get("org.kvbake.standin.requirements-sha256") or docker.image.inspect(image).id


def cached_model(model_dir: Path) -> bool:
    """True when the model folder exists and every file still has its recorded sha256."""
    sums = sums_path(model_dir)
    return model_dir.is_dir() and sums.is_file() and json.loads(sums.read_text()) == file_hashes(model_dir)


def build_model(docker, image: str, model_dir: Path) -> None:  # noqa: ANN001 - python-on-whales client
    """Generate into a scratch folder beside the cache entry, then move it into place with its sums."""
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=model_dir.parent, prefix=".partial-"))
    try:
        generate_in_image(docker, image, scratch / "model")
        shutil.rmtree(model_dir, ignore_errors=True)
        (scratch / "model").rename(model_dir)
        for path in model_dir.iterdir():
            path.chmod(0o644)
        sums_path(model_dir).write_text(json.dumps(file_hashes(model_dir), indent=2, sort_keys=True) + "\n")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def reproducibility(docker, image: str, cache_dir: Path) -> dict[str, bool]:  # noqa: ANN001
    """Generate twice into scratch folders and say, per file, whether both runs wrote the same bytes."""
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".repro-") as work:
        first, second = Path(work) / "a", Path(work) / "b"
        generate_in_image(docker, image, first)
        generate_in_image(docker, image, second)
        one, two = file_hashes(first), file_hashes(second)
    return {name: one.get(name) == two.get(name) for name in sorted(set(one) | set(two))}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The host command line (the `generate OUT` form is for inside the image)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="image whose torch/transformers generate the model")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                        help="where model folders are kept (default: %(default)s)")
    parser.add_argument("--rebuild", action="store_true", help="generate even if the cached folder verifies")
    parser.add_argument("--check-reproducible", action="store_true",
                        help="also generate twice more and compare every file's sha256")
    parser.add_argument("--corpus", type=Path, default=None, metavar="DIR",
                        help="also write a validation corpus in the model's vocabulary to DIR (for validate --corpus)")
    return parser.parse_args(argv)


def ensure_model(docker, args: argparse.Namespace) -> Path:  # noqa: ANN001 - python-on-whales client
    """The verified cached model folder, generated first when missing or damaged (or --rebuild)."""
    model_dir = args.cache_dir.expanduser() / f"tiny-llama-{spec_key(image_inputs(docker, args.image))}"
    if args.rebuild or not cached_model(model_dir):
        build_model(docker, args.image, model_dir)
    if args.check_reproducible:
        same = reproducibility(docker, args.image, model_dir.parent)
        differing = [name for name, ok in same.items() if not ok]
        print("byte-reproducible: " + ("yes" if not differing else f"no ({', '.join(differing)})"))
    return model_dir


def host_main(argv: Sequence[str] | None) -> int:
    """Make (or reuse) the cached model folder and print its file hashes and path."""
    sys.path.insert(0, str(SCRIPT.parents[1]))
    from python_on_whales import DockerClient
    from python_on_whales.exceptions import DockerException

    from kvbake.errors import EngineError, KvbakeError

    args = parse_args(argv)
    try:
        try:
            model_dir = ensure_model(DockerClient(), args)
        except DockerException as err:
            detail = (err.stderr or err.stdout or "").strip().splitlines() or [f"exit code {err.return_code}"]
            raise EngineError(f"generating the model in {args.image} failed: {detail[-1]}",
                              fix="start the docker engine, or run scripts/standin_vllm_base.py --rebuild") from err
    except KvbakeError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    for name, digest in json.loads(sums_path(model_dir).read_text()).items():
        print(f"  {digest}  {name}")
    if args.corpus is not None:
        write_corpus(args.corpus)
        print(f"corpus: {args.corpus}")
    print(model_dir)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`generate OUT` inside the image; otherwise the host command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["generate"] and len(argv) == 2:
        generate(Path(argv[1]))
        return 0
    return host_main(argv)


if __name__ == "__main__":
    sys.exit(main())
