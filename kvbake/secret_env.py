"""Which of a serve's variables, options and labels are secrets (tokens, API keys, passwords): recorded by name only."""

# A serve often runs with HF_TOKEN or an API key. kvbake writes what it reads from a serve into deploy.yaml, node
# records and journals; a secret there is a leak (and the secret scan then refuses the file). So a secret is carried by
# its name only, and its value reaches the serve from the environment `kvbake deploy` (or rollback) runs in.

from __future__ import annotations

import re
import shlex
from typing import Mapping, Sequence

from kvbake.secretscan import credential_kind

SECRET_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY")
# Any other variable whose name ends so (or is the word itself) holds a secret too; MAX_TOKENS or MAX_TOKEN_LEN does not.
SECRET_SUFFIXES = ("_TOKEN", "_API_KEY", "_PASSWORD")
# The options of vLLM (and of `ray start`) whose value is a secret, and the variable that value is restored from: the one
# vLLM or the Hugging Face hub reads the same value from when the option is absent (Ray reads none: the name is kvbake's,
# and init writes the option as `--redis-password={secret:RAY_REDIS_PASSWORD}`, which kvbake's launcher fills in).
# Not secrets: --max-num-batched-tokens, --tokenizer, --ssl-keyfile (a path).
SECRET_OPTIONS = {"--api-key": "VLLM_API_KEY", "--hf-token": "HF_TOKEN", "--redis-password": "RAY_REDIS_PASSWORD"}
# vLLM's --api-key takes every value up to the next option (several keys); the others one, a bare --hf-token none.
MANY_VALUES = ("--api-key",)
WITHHELD = "(secret: from {name} where kvbake runs)"
NOTE = re.compile(re.escape(WITHHELD).replace(re.escape("{name}"), "([A-Za-z_][A-Za-z0-9_]*)"))


def is_secret_name(name: str) -> bool:
    """A variable that holds a secret by its name alone: a named one, or one whose name ends in a secret suffix."""
    upper = name.upper()
    return upper in SECRET_NAMES or f"_{upper}".endswith(SECRET_SUFFIXES)


def is_secret(name: str, value: str) -> bool:
    """A variable is a secret by its name, or when its value looks like a credential."""
    return is_secret_name(name) or credential_kind(value) is not None


def split_secrets(env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """(the variables that are no secret, the names of those that are, sorted)."""
    names = tuple(sorted(name for name, value in env.items() if is_secret(name, value)))
    return {name: value for name, value in env.items() if name not in names}, names


def split_env_list(entries: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """A container's `NAME=value` list without its secrets, and the secrets' names."""
    kept, names = [], []
    for entry in entries:
        name, _, value = entry.partition("=")
        (names.append(name) if is_secret(name, value) else kept.append(entry))
    return kept, tuple(sorted(set(names)))


def secret_option(token: str) -> str | None:
    """The secret option a token names (`--api_key` is vLLM's `--api-key`), else None."""
    name = token.partition("=")[0]
    option = "--" + name[2:].replace("_", "-") if name.startswith("--") else name
    return option if option in SECRET_OPTIONS else None


def value_count(rest: Sequence[str], option: str) -> int:
    """How many of the tokens after a secret option are its values: none that looks like an option."""
    count = 0
    for token in rest:
        if token.startswith("-") or (count and option not in MANY_VALUES):
            break
        count += 1
    return count


def value_variable(variable: str, index: int) -> str:
    """The variable a secret option's value is restored from: the option's for the first, VLLM_API_KEY_2 for a second key."""
    return variable if index == 0 else f"{variable}_{index + 1}"


def secret_values(argv: Sequence[str]) -> dict[int, tuple[str, str]]:
    """Where a command line gives a secret option's value: {token's index: (the value, its variable)}; the value of
    `--api-key=K` is the end of its own token."""
    found, at = {}, 0
    while at < len(argv):
        option = secret_option(argv[at])
        if option is not None and "=" in argv[at]:
            found[at] = (argv[at].partition("=")[2], SECRET_OPTIONS[option])
        elif option is not None:
            count = value_count(argv[at + 1:], option)
            found.update({at + 1 + index: (argv[at + 1 + index], value_variable(SECRET_OPTIONS[option], index)) for index in range(count)})
            at += count
        at += 1
    return {index: given for index, given in found.items() if given[0]}


def withhold_args(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """A command line with the value of every secret option replaced by a note naming the variable that holds it
    (`--api-key X` and `--api-key=X` alike, and in a shell's script: `sh -c "vllm serve … --api-key X"`), and those
    variables' names."""
    found = secret_values(argv)
    out = []
    for at, token in enumerate(argv):
        if at in found:
            value, variable = found[at]
            out.append(token[: len(token) - len(value)] + note(variable))
        else:
            out.append(replace_words(token, {value: note(variable) for value, variable in script_secrets(token)}))
    return out, tuple(noted_names(out))


def note(variable: str) -> str:
    return WITHHELD.format(name=variable)


def script_secrets(text: str) -> list[tuple[str, str]]:
    """The secret values a shell's script gives its commands, its own scripts' included, with their variables; a
    reference to a variable (`--api-key "$VLLM_API_KEY"`) holds none."""
    if not any(letter.isspace() for letter in text):
        return []
    text = NOTE.sub("$withheld", text)  # a value withheld already reads as a reference: it stays as it is
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    found = [*secret_values(words).values(), *(secret for word in words for secret in script_secrets(word))]
    return [(value, variable) for value, variable in found if "$" not in value]


def replace_words(text: str, replacements: Mapping[str, str]) -> str:
    """`text` with each word of `replacements` replaced, in one pass, wherever it stands whole (between spaces or quotes,
    or after `=`)."""
    if not replacements:
        return text
    words = "|".join(re.escape(word) for word in sorted(replacements, key=len, reverse=True))
    return re.sub(rf"(?<![^\s'\"=])(?:{words})(?![^\s'\"])", lambda found: replacements[found.group(0)], text)


def withhold_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Labels with each secret value replaced by its note: a label whose name read as a variable's
    (`org.example.hf_token` is ORG_EXAMPLE_HF_TOKEN) is a secret's, or whose value looks like a credential, is restored
    from that variable; a command line a label holds is withheld as a command line is."""
    kept = {}
    for key, value in labels.items():
        variable = re.sub(r"[^A-Za-z0-9]+", "_", key).strip("_").upper()
        kept[key] = note(variable) if is_secret(variable, str(value)) else withhold_args([str(value)])[0][0]
    return kept


def noted_names(texts: Sequence[str]) -> list[str]:
    """The variables the notes in these texts name, sorted."""
    return sorted({name for text in texts for name in NOTE.findall(text)})


def restore_text(text: str, env: Mapping[str, str]) -> str:
    """A text with each note `withhold_args` or `withhold_labels` wrote replaced by its variable's value from `env`."""
    return NOTE.sub(lambda found: env[found.group(1)], text)


def restore_args(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The command line `withhold_args` wrote, with each withheld value taken from `env` again."""
    return [restore_text(token, env) for token in argv]


def missing_secrets(names: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The named secrets the environment does not hold (an empty value counts as missing)."""
    return sorted(name for name in set(names) if not env.get(name))
