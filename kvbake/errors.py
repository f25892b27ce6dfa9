"""The one error hierarchy of kvbake; each class owns one documented exit code."""

from __future__ import annotations


class KvbakeError(Exception):
    """Base of every expected failure: a one-line message that names the cause and the fix."""

    exit_code = 1
    title = "error"
    # What falls under a code, in detail: each subclass lists it; docs/exit_codes.md is generated from these.
    cases = ""
    # What exit 1 means to a user: every expected failure has its own class and code, so only a bug ends with 1.
    meaning = "an unexpected failure (a bug: please report it with --debug output)"

    def __init__(self, message: str, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """Render the cause and, when known, the fix on a single line."""
        text = " ".join(self.message.split())
        if self.fix:
            text = f"{text}; fix: {' '.join(self.fix.split())}"
        return text


class UsageError(KvbakeError):
    """The command line cannot be used: an unknown command or option, a missing or conflicting argument."""

    exit_code = 2
    title = "usage"
    cases = ("an unknown command or option, a missing or conflicting argument (`deploy` without `--preset`, `deploy "
             "--resume` with `--revert`, `config` without a preset, `--rollback-on-failure` without `--deploy`), "
             "`--out` that is not a folder, `deploy --image` given by tag (a digest reference only), `validate` against "
             "a serve that refuses its API key (HTTP 401/403) or whose key the environment lacks; `export-k8s` into an "
             "existing `--out` folder without `--force`, or a `--secret` that does not match deploy.yaml's `SECRET_ENV`")


class ManifestError(KvbakeError):
    """The manifest is malformed, violates the schema or breaks a semantic rule."""

    exit_code = 3
    title = "manifest"
    cases = ("malformed YAML, schema violation, or a semantic rule (duplicate ids, unneeded dependency, undeclared "
             "`requires`, declared-and-forbidden, bad path, switch coverage: a name the chain reads is not declared, "
             "or a declared switch is read by nothing)")


class LockError(KvbakeError):
    """The lock is missing, malformed or drifted from the manifest."""

    exit_code = 4
    title = "lock"
    cases = ("missing (unlocked manifest), malformed (empty, truncated, not UTF-8, not JSON, a missing or unknown key,"
             " a wrong type; the field is named), of another format, or drifted from the manifest; another `lock` "
             "running on the same manifest; an interrupted `lock` whose folders it cannot resolve; a "
             "`SOURCE_DATE_EPOCH` that is not digits")


class PatchError(KvbakeError):
    """A patch is missing, has another hash, or does not apply strictly."""

    exit_code = 5
    title = "patch"
    cases = ("missing, other sha256, does not apply, offset/fuzz, already applied, reversed, outside the source root, "
             "touches nothing, a new-file section for a path the base already has; a symlink, mode change, deletion, "
             "rename, copy or binary section; a touched path that is not a regular file (docs/patches.md)")


class BaseImageError(KvbakeError):
    """The base image is absent locally or differs from the lock."""

    exit_code = 6
    title = "base image"
    cases = ("absent locally (never pulled), or other config digest/diff_ids/platform than locked; a `docker save` "
             "that is truncated, lacks a blob or has a layer of unknown compression")


class IntegrityError(KvbakeError):
    """A hash, label, layer or environment check failed."""

    exit_code = 7
    title = "integrity"
    cases = ("a base file's hash, `overlay/` drift, or a verify failure (layers, labels, switch in Env, read-back "
             "hash, stale bytecode, what a rank's processes run, a node's `current` or `previous` tag that its records do not "
             "name); a credential in a label, a record or an option "
             "kvbake would write (`--reason`, `--endpoint`, `--model`); a serving vLLM process whose command line "
             "kvbake cannot read honestly (`--config FILE`, no model, two models, a value option without its value); an "
             "`export-k8s` document that breaks its pinned CRD schema or kvbake's own checks (an image by tag, a secret "
             "given inline, a policy without a key authority, a namespace without the include label); nothing is written")


class EngineError(KvbakeError):
    """The docker engine is unreachable or refused an operation."""

    exit_code = 8
    title = "engine"
    cases = ("the docker engine is unreachable, older than 20.10, or refused an operation")


class DonorError(KvbakeError):
    """The donor checkout is dirty, at another revision, or lacks a patch."""

    exit_code = 9
    title = "donor"
    cases = ("checkout dirty, at another revision, or without a selected patch")


class ResourceError(KvbakeError):
    """The machine ran out of a resource (for example disk space) while writing."""

    exit_code = 10
    title = "resource"
    cases = ("no space left while writing the archive, or a file kvbake must write cannot be written; `doctor` found "
             "free disk or MemAvailable below its floor")


class RegistryError(KvbakeError):
    """The registry is unreachable, refused credentials, or holds other content."""

    exit_code = 11
    title = "registry"
    cases = ("unreachable, auth failure, a tag holding other content, a digest that does not read back as pushed, an "
             "answer kvbake cannot use (bad manifest, garbage token, redirect loop)")


class RolloutError(KvbakeError):
    """A deploy or rollback step failed; every node was reverted."""

    exit_code = 12
    title = "rollout"
    cases = ("a node unreachable or without the base, a pulled image that is not the release's (config digest, layers,"
             " labels, runtime config), a node whose image store changed since the last deploy (without `--reseat`), a"
             " failing launcher, verify-running failed after a step (every node was reverted), a live lock (also for "
             "`--resume`, `--revert` and `--break-lock`), a lock this host lost, an interrupted deploy's or adopt's "
             "journal, no previous release or nodes whose previous releases differ, a node's `current` or `previous` tag "
             "that points elsewhere than its records say (`deploy --reset-tags` resets it); adopt: no serving container or no "
             "vLLM serve in it, ranks that run different serves, a `--rm` serve with settings kvbake cannot recreate, "
             "nothing to resume or release")


class LockLost(RolloutError):
    """This host no longer holds a node's lock (another host broke it as stale): it changes nothing more, and reverts
    nothing, since the host that holds the lock now finishes or undoes the transition."""


class DivergedError(KvbakeError):
    """The nodes no longer agree and could not be reverted; a repair is required."""

    exit_code = 13
    title = "diverged"
    cases = ("a step and its revert both failed; further deploys are refused until `deploy --revert` repairs it")


class PresetError(KvbakeError):
    """A preset is unknown or breaks a switch rule."""

    exit_code = 14
    title = "preset"
    cases = ("unknown, a forbidden switch, a value outside the allowed set, a missing `requires`, held/untested "
             "without its flag and reason, above the drafter's limit")


class ValidationStop(KvbakeError):
    """A supervised validation run hit a stop condition."""

    exit_code = 15
    title = "validation stop"
    cases = ("a step of the supervised plan failed, or MemAvailable fell below the floor (docs/operate.md); a rank's "
             "logged KV capacity differs from `capacity`'s prediction")


class CorpusError(KvbakeError):
    """A corpus folder is missing or malformed."""

    exit_code = 16
    title = "corpus"
    cases = ("the corpus folder is missing or malformed")


class KvArithError(KvbakeError):
    """The KV arithmetic got a config or option it cannot use."""

    exit_code = 17
    title = "kv arithmetic"
    cases = ("`scripts/kv_arith.py` or `capacity` got a config, option or preset it cannot use (docs/kv_arith.md)")


class RebaseError(KvbakeError):
    """A rebase candidate that cannot be accepted: another manifest's, stale, or with a conflict marker left."""

    exit_code = 18
    title = "rebase"
    cases = ("`rebase --accept` of a folder `rebase --to` did not write, of another manifest's candidate or one made "
             "from another lock, after the target tag moved (a stale report), or while a conflict marker remains")


class SignatureError(KvbakeError):
    """Signing or checking a signature failed: no cosign, no password, a key in the way, or cosign's refusal."""

    exit_code = 19
    title = "signature"
    cases = ("`keys`, `sign` or `push --sign` without cosign, without the key's password (COSIGN_PASSWORD or a "
             "terminal), over an existing key file, with a missing or non-cosign key file, a password that does not "
             "open the key, or refused by cosign (an unreachable registry, a refused upload: the signature tags are "
             "put back); `trace`: a signature or attestation that cosign refuses for a key, or that signs another "
             "digest or other materials; `deploy` and `rollback` with `signing.require_signature`: no listed key signs"
             " and attests the release (or no key is listed); nothing moves; `export-k8s` with its policies when deploy.yaml "
             "lists no signing key")


EXIT_CODES: tuple[type[KvbakeError], ...] = (
    KvbakeError,
    UsageError,
    ManifestError,
    LockError,
    PatchError,
    BaseImageError,
    IntegrityError,
    EngineError,
    DonorError,
    ResourceError,
    RegistryError,
    RolloutError,
    DivergedError,
    PresetError,
    ValidationStop,
    CorpusError,
    KvArithError,
    RebaseError,
    SignatureError,
)
