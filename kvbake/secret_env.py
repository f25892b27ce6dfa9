"""Which of a serve's variables and options are secrets (tokens, API keys): kvbake records them by name, never by value."""

# A serve often runs with HF_TOKEN or an API key. kvbake writes what it reads from a serve into deploy.yaml, node
# records and journals; a secret there is a leak (and the secret scan then refuses the file). So a secret is carried by
# its name only, and its value reaches the serve from the environment `kvbake deploy` (or rollback) runs in.

from __future__ import annotations

from typing import Mapping, Sequence

from kvbake.secretscan import credential_kind

SECRET_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "OPENAI_API_KEY")
# vLLM options whose value is a secret, and the variable vLLM reads the same value from when the option is absent.
SECRET_OPTIONS = {"--api-key": "VLLM_API_KEY"}
WITHHELD = "(secret: from {name} where kvbake runs)"


def is_secret(name: str, value: str) -> bool:
    """A variable is a secret by its name, or when its value looks like a credential."""
    return name in SECRET_NAMES or credential_kind(value) is not None


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


def withhold_args(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """A command line with the value of every secret option replaced by a note naming the variable that holds it
    (`--api-key X` and `--api-key=X` alike), and those variables' names."""
    out, names = [], []
    skip = False
    for at, token in enumerate(argv):
        if skip:
            skip = False
            continue
        option, equals, value = token.partition("=")
        variable = SECRET_OPTIONS.get(option)
        if variable and equals:
            out.append(f"{option}={WITHHELD.format(name=variable)}")
            names.append(variable)
        elif variable and at + 1 < len(argv):
            out += [option, WITHHELD.format(name=variable)]
            names.append(variable)
            skip = True
        else:
            out.append(token)
    return out, tuple(sorted(set(names)))


def restore_args(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The command line `withhold_args` wrote, with each withheld value taken from `env` again."""
    restored = []
    for token in argv:
        for variable in SECRET_OPTIONS.values():
            note = WITHHELD.format(name=variable)
            if token == note or token.endswith("=" + note):
                token = token[: len(token) - len(note)] + env[variable]
        restored.append(token)
    return restored


def missing_secrets(names: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The named secrets the environment does not hold (an empty value counts as missing)."""
    return sorted(name for name in set(names) if not env.get(name))
