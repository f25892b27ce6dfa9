"""The command lines of serving vLLM processes: which argv is a vLLM serve, in which form, and its exact arguments."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Iterable, Sequence

from kvbake.errors import IntegrityError
from kvbake.secretscan import credential_kind, withheld
from kvbake.serve.core.python_argv import interpreter_target, is_interpreter
from kvbake.serve.core.vllm_options import (ANY, FLAG, ONE_OR_MORE, VALUE, Entry, OptionTable, OptionToken, canonical_name,
                                           is_option_token, read_option, render_entries, serve_options)

# The forms a process runs vLLM's serve in.
SERVE_SCRIPT, CLI_MAIN, API_SERVER = "serve", "cli.main serve", "api_server"
CLI_MAIN_MODULE = "vllm.entrypoints.cli.main"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
FORM_LABELS = {SERVE_SCRIPT: "vllm serve", CLI_MAIN: f"python3 -m {CLI_MAIN_MODULE} serve",
               API_SERVER: f"python3 -m {API_SERVER_MODULE}"}
# The options a launcher owns because they place one rank among the others: the node count and this node's rank, the
# rendezvous of a multi-node group, the headless worker, and this node's share of a data-parallel deployment.
PER_NODE_OPTIONS = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless", "--data-parallel-rank",
                    "--data-parallel-start-rank", "--data-parallel-size-local", "--data-parallel-address",
                    "--data-parallel-rpc-port")
MODEL_OPTION = "--model"
# Why kvbake cannot read a serve that gives one of these, and what to do instead.
REFUSED_OPTIONS = {
    "--config": ("reads further arguments from a file, which the command line does not show",
                 "start the serve with every option on its command line, not in a --config file"),
    "--help": ("prints the help and exits; it serves nothing", "remove {spelling}"),
    "--version": ("prints the version and exits; it serves nothing", "remove {spelling}"),
}


@dataclass(frozen=True)
class ServeArgs:
    """vLLM's arguments as given: the model it serves, the positional argument that named it (None when only --model
    did), every option in order under its canonical name with its values, and the options the table does not know."""

    model: str
    positional: str | None
    entries: tuple[Entry, ...]
    unknown: tuple[str, ...] = ()

    @property
    def model_source(self) -> str:
        """'positional', '--model' or 'both'; '' once without() dropped the model."""
        named = self.given(MODEL_OPTION)
        if self.positional is None:
            return MODEL_OPTION if named else ""
        return "both" if named else "positional"

    def argv(self) -> list[str]:
        """The arguments as tokens: the positional model first (last, after `--`, when it looks like an option), then
        every entry."""
        options = render_entries(self.entries)
        if self.positional is None:
            return options
        if is_option_token(self.positional, serve_options()):
            return [*options, "--", self.positional]
        return [self.positional, *options]

    def all_values(self, name: str) -> tuple[tuple[str, ...], ...]:
        """The values of every occurrence of an option (any spelling), in order."""
        wanted = canonical_name(name)
        return tuple(values for option, values in self.entries if option == wanted)

    def values(self, name: str) -> tuple[str, ...] | None:
        """The values of the option's last occurrence (the one vLLM keeps); None when it is not given."""
        found = self.all_values(name)
        return found[-1] if found else None

    def value(self, name: str) -> str | None:
        """The one value of the option's last occurrence; None when it is not given or given without a value (a flag,
        a bare --hf-token); ValueError when that occurrence took several."""
        values = self.values(name) or ()
        if len(values) > 1:
            raise ValueError(f"{canonical_name(name)} is given {len(values)} values, not one")
        return values[0] if values else None

    def given(self, name: str) -> bool:
        """Whether the option occurs at all, in any spelling."""
        return bool(self.all_values(name))

    def without(self, names: Iterable[str]) -> ServeArgs:
        """These arguments less the named options and their dotted keys (the model keeps naming what the serve ran;
        dropping --model drops the positional model too)."""
        dropped = {canonical_name(name) for name in names}
        entries = tuple(entry for entry in self.entries if not _named(entry[0], dropped))
        positional = None if MODEL_OPTION in dropped else self.positional
        unknown = tuple(name for name in self.unknown if not _named(name, dropped))
        return ServeArgs(self.model, positional, entries, unknown)

    def split(self, names: Iterable[str] = PER_NODE_OPTIONS) -> tuple[tuple[Entry, ...], ServeArgs]:
        """(the entries of the named options, the rest): by default what differs per rank, and what every rank shares."""
        chosen = {canonical_name(name) for name in names}
        return tuple(entry for entry in self.entries if _named(entry[0], chosen)), self.without(chosen)


@dataclass(frozen=True)
class ServeEntry:
    """How a process runs vLLM's serve: the form, and the argv before vLLM's own arguments."""

    form: str
    prefix: tuple[str, ...]


@dataclass(frozen=True)
class ServeProcess:
    """A serving vLLM process read from its argv: the form, the argv before vLLM's arguments, and those arguments."""

    form: str
    prefix: tuple[str, ...]
    args: ServeArgs

    @property
    def model(self) -> str:
        return self.args.model

    def argv(self) -> list[str]:
        """The whole command line again: the prefix, then the arguments as ServeArgs.argv renders them."""
        return [*self.prefix, *self.args.argv()]


def _named(name: str, names: set[str]) -> bool:
    """An option, or a dotted key of one (`--compilation-config.mode` of `--compilation-config`), among `names`."""
    return name in names or name.partition(".")[0] in names


# ---- recognising a serve ----

def parse_serve_process(argv: Sequence[str]) -> ServeProcess | None:
    """The serve an argv runs, its arguments parsed; None when the process is no vLLM serve (IntegrityError when it
    is one whose arguments kvbake cannot read honestly)."""
    entry = serve_entry(argv)
    if entry is None:
        return None
    return ServeProcess(entry.form, entry.prefix, parse_serve_args(argv[len(entry.prefix):], entry.form))


def serve_entry(argv: Sequence[str]) -> ServeEntry | None:
    """The form and prefix of a vLLM serve: the `vllm` console script (wherever it lives) with `serve`, an interpreter
    running that script, or `-m` of the CLI's main module with `serve` or of the OpenAI API server; None otherwise."""
    argv = list(argv)
    if not argv:
        return None
    if posixpath.basename(argv[0]) == "vllm":
        return _console_script(argv, 0)
    target = interpreter_target(argv) if is_interpreter(argv[0]) else None
    if target is None:
        return None
    at, module = target
    if module is None:
        return _console_script(argv, at) if posixpath.basename(argv[at]) == "vllm" else None  # a script's index is in argv
    if module == API_SERVER_MODULE:
        return ServeEntry(API_SERVER, tuple(argv[:at]))
    if module == CLI_MAIN_MODULE and argv[at:at + 1] == ["serve"]:
        return ServeEntry(CLI_MAIN, tuple(argv[:at + 1]))
    return None


def _console_script(argv: list[str], at: int) -> ServeEntry | None:
    """The `vllm` script at `at` runs a serve when its subcommand is `serve` (not bench, chat, ...)."""
    return ServeEntry(SERVE_SCRIPT, tuple(argv[:at + 2])) if argv[at + 1:at + 2] == ["serve"] else None


# ---- reading the arguments ----

def _shown(text: str) -> str:
    """A value for a message: quoted, or withheld when it looks like a credential."""
    kind = credential_kind(text)
    return withheld(kind) if kind else repr(text)


def _missing_value(what: str, option: OptionToken, spelling: str, args: list[str], at: int) -> IntegrityError:
    where = f"is followed by the option {args[at].partition('=')[0]}" if at < len(args) else "ends the command line"
    return IntegrityError(f"{what}: {spelling} takes a value but {where}",
                          f"give {option.name} its value ({option.name} VALUE), or remove it")


def _values(option: OptionToken, spelling: str, args: list[str], at: int, table: OptionTable,
            what: str) -> tuple[tuple[str, ...], int]:
    """The values an option takes from the tokens from `at` on, and where the next token starts."""
    if option.inline is not None:
        if option.arity == FLAG:
            raise IntegrityError(f"{what}: {spelling} is a flag but is given the value {_shown(option.inline)}",
                                 f"give {spelling} without a value")
        return (option.inline,), at
    free = 0
    while at + free < len(args) and not is_option_token(args[at + free], table):
        free += 1
    if option.arity in (VALUE, ONE_OR_MORE) and free == 0:
        raise _missing_value(what, option, spelling, args, at)
    taken = {FLAG: 0, VALUE: 1, ONE_OR_MORE: free, ANY: free}.get(option.arity, min(free, 1))
    return tuple(args[at:at + taken]), at + taken


def _read_tokens(args: list[str], table: OptionTable, what: str) -> tuple[list[Entry], list[str], list[str]]:
    """Every option with its values in order, the positional arguments, and the names of unknown options."""
    entries, positionals, unknown, at = [], [], [], 0
    while at < len(args):
        token = args[at]
        if token == "--":
            positionals += args[at + 1:]
            break
        if not is_option_token(token, table):
            positionals.append(token)
            at += 1
            continue
        option, spelling = read_option(token, table), token.partition("=")[0]
        refused = REFUSED_OPTIONS.get(option.name.partition(".")[0])
        if refused:
            raise IntegrityError(f"{what}: {spelling} {refused[0]}", refused[1].format(spelling=spelling))
        values, at = _values(option, spelling, args, at + 1, table, what)
        entries.append((option.name, values))
        if option.arity is None and option.name not in unknown:
            unknown.append(option.name)
    return entries, positionals, unknown


def _model(entries: list[Entry], positionals: list[str], form: str, what: str) -> tuple[str, str | None]:
    """The model the serve runs and the positional argument that named it: the positional and every --model agree."""
    if form == API_SERVER and positionals:
        raise IntegrityError(f"{what} ignores the positional argument {_shown(positionals[0])} and serves --model's model",
                             "give the model with --model only")
    if len(positionals) > 1:
        raise IntegrityError(f"{what}: unexpected argument {_shown(positionals[1])} after the model {_shown(positionals[0])}",
                             "give one positional argument, the model")
    named = [values[0] for name, values in entries if name == MODEL_OPTION]
    models = positionals[:1] + named
    if not models:
        raise IntegrityError(f"{what} names no model (neither a positional model nor --model)",
                             "give the model: vllm serve MODEL, or --model MODEL")
    other = next((model for model in models if model != models[0]), None)
    if other is not None:
        raise IntegrityError(f"{what} names two models, {_shown(models[0])} and {_shown(other)}",
                             "give the model once, as the positional argument or with --model")
    if not models[0]:
        raise IntegrityError(f"{what} names an empty model", "give the model's path or name")
    return models[0], (positionals[0] if positionals else None)


def parse_serve_args(args: Sequence[str], form: str = SERVE_SCRIPT) -> ServeArgs:
    """vLLM's arguments (what follows `serve`, or the API server module) parsed with the table of vLLM's options;
    IntegrityError for a command line kvbake cannot read honestly."""
    what = FORM_LABELS[form]
    entries, positionals, unknown = _read_tokens(list(args), serve_options(), what)
    model, positional = _model(entries, positionals, form, what)
    return ServeArgs(model, positional, tuple(entries), tuple(unknown))
