"""The one error hierarchy of kvbake; each class owns one documented exit code."""

from __future__ import annotations


class KvbakeError(Exception):
    """Base of every expected failure: a one-line message that names the cause and the fix."""

    exit_code = 1
    title = "error"
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


class ManifestError(KvbakeError):
    """The manifest is malformed, violates the schema or breaks a semantic rule."""

    exit_code = 3
    title = "manifest"


class LockError(KvbakeError):
    """The lock is missing, malformed or drifted from the manifest."""

    exit_code = 4
    title = "lock"


class PatchError(KvbakeError):
    """A patch is missing, has another hash, or does not apply strictly."""

    exit_code = 5
    title = "patch"


class BaseImageError(KvbakeError):
    """The base image is absent locally or differs from the lock."""

    exit_code = 6
    title = "base image"


class IntegrityError(KvbakeError):
    """A hash, label, layer or environment check failed."""

    exit_code = 7
    title = "integrity"


class EngineError(KvbakeError):
    """The docker engine is unreachable or refused an operation."""

    exit_code = 8
    title = "engine"


class DonorError(KvbakeError):
    """The donor checkout is dirty, at another revision, or lacks a patch."""

    exit_code = 9
    title = "donor"


class ResourceError(KvbakeError):
    """The machine ran out of a resource (for example disk space) while writing."""

    exit_code = 10
    title = "resource"


class RegistryError(KvbakeError):
    """The registry is unreachable, refused credentials, or holds other content."""

    exit_code = 11
    title = "registry"


class RolloutError(KvbakeError):
    """A deploy or rollback step failed; every node was reverted."""

    exit_code = 12
    title = "rollout"


class LockLost(RolloutError):
    """This host no longer holds a node's lock (another host broke it as stale): it changes nothing more, and reverts
    nothing, since the host that holds the lock now finishes or undoes the transition."""


class DivergedError(KvbakeError):
    """The nodes no longer agree and could not be reverted; a repair is required."""

    exit_code = 13
    title = "diverged"


class PresetError(KvbakeError):
    """A preset is unknown or breaks a switch rule."""

    exit_code = 14
    title = "preset"


class ValidationStop(KvbakeError):
    """A supervised validation run hit a stop condition."""

    exit_code = 15
    title = "validation stop"


class CorpusError(KvbakeError):
    """A corpus folder is missing or malformed."""

    exit_code = 16
    title = "corpus"


class KvArithError(KvbakeError):
    """The KV arithmetic got a config or option it cannot use."""

    exit_code = 17
    title = "kv arithmetic"


class RebaseError(KvbakeError):
    """A rebase candidate that cannot be accepted: another manifest's, stale, or with a conflict marker left."""

    exit_code = 18
    title = "rebase"


class SignatureError(KvbakeError):
    """Signing or checking a signature failed: no cosign, no password, a key in the way, or cosign's refusal."""

    exit_code = 19
    title = "signature"


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
