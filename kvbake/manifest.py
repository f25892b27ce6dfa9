"""Load manifest.yaml: YAML, then the JSON Schema (every error with its path), then semantic rules, then frozen values."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import jsonschema

from kvbake.digests import canonical_json
from kvbake.errors import ManifestError
from kvbake.safepath import resolve_inside
from kvbake.yaml_documents import check_strings, describe_schema_error, did_you_mean, parse_yaml

TAG_FIELDS = ("base_tag", "short_id", "name")
# Runtime sections: what a deploy passes to the ranks. Changing them never changes the lock or the image.
RUNTIME_SECTIONS = ("presets", "drafter")
# Prose the build never reads: free to edit without a re-lock.
PROSE_SECTIONS = ("description",)
PROSE_KEYS = ("summary",)


@dataclass(frozen=True)
class BaseImage:
    """The image the chain is baked onto, and where its Python sources live."""

    image: str
    platform: str
    source_root: str

    @property
    def name(self) -> str:
        """The repository part: `host:port/path`, without tag or digest."""
        head = self.image.split("@", 1)[0]
        last = head.rsplit("/", 1)[-1]
        return head.rsplit(":", 1)[0] if ":" in last else head

    @property
    def digest(self) -> str | None:
        """The pinned manifest digest (`name@sha256:…` or `name:tag@sha256:…`), or None."""
        return self.image.split("@", 1)[1] if "@" in self.image else None

    @property
    def tag(self) -> str:
        """The tag, or for a digest-only reference `sha256-` and the digest's first 12 hex digits."""
        head = self.image.split("@", 1)[0]
        if head != self.name:
            return head.rsplit(":", 1)[1]
        return "sha256-" + (self.digest or "")[7:19]

    @property
    def node_name(self) -> str:
        """The name every node keeps the base under (`base sync` tags it, deploy's phase 1 looks for it): the
        reference itself when it has no digest, else `name:tag`."""
        return self.image if self.digest is None else f"{self.name}:{self.tag}"


@dataclass(frozen=True)
class Donor:
    """The upstream checkout the patches come from, pinned to one revision."""

    url: str
    revision: str


@dataclass(frozen=True)
class ChainPatch:
    """One patch of the ordered chain."""

    id: str
    file: str
    path: Path
    role: str
    needed_by: tuple[str, ...]
    summary: str


@dataclass(frozen=True)
class Switch:
    """An opt-in runtime switch; unset (off) by default in every image."""

    name: str
    values: tuple[str, ...]
    requires: tuple[str, ...]
    summary: str
    effect: str | None = None  # "kv_blocks_factor": the value, an integer, multiplies the KV blocks vLLM plans


@dataclass(frozen=True)
class Preset:
    """A named runtime configuration for every rank."""

    name: str
    status: str
    max_model_len: int
    switches: Mapping[str, str]
    note: str
    prefix_block: int
    launcher_args: tuple[str, ...]


@dataclass(frozen=True)
class Output:
    """Where the derived image goes and how its tag is formed."""

    repository: str
    tag: str


@dataclass(frozen=True)
class Manifest:
    """The validated manifest; paths are already resolved inside its folder."""

    path: Path
    sha256: str
    image_sha256: str
    runtime_sha256: str
    name: str
    description: str
    standin: bool
    licenses: str
    base: BaseImage
    donor: Donor
    chain: tuple[ChainPatch, ...]
    switches: Mapping[str, Switch]
    forbidden: Mapping[str, str]
    drafter_max_positions: int | None
    presets: Mapping[str, Preset]
    output: Output

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.stem + ".lock.json")

    def patch(self, patch_id: str) -> ChainPatch:
        return next(p for p in self.chain if p.id == patch_id)


def load_manifest(path: Path) -> Manifest:
    """Read, validate and freeze the manifest at `path`."""
    path = Path(path).absolute()
    raw_bytes = _read_bytes(path)
    document = parse_yaml(raw_bytes, path.name)
    check_strings(document, path.name)
    validate_schema(document, path.name)
    check_semantics(document, path.name)
    try:
        return freeze(document, path, hashlib.sha256(raw_bytes).hexdigest())
    except ManifestError as err:
        raise ManifestError(f"{path.name}: {err.message}", err.fix) from None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ManifestError(f"manifest {path.name} not found", "pass --manifest PATH or run from the project folder") from None
    except OSError as err:
        raise ManifestError(f"manifest {path.name} unreadable: {err.strerror}", "check the file's permissions") from err


def manifest_schema() -> dict:
    """The JSON Schema shipped as package data."""
    text = resources.files("kvbake").joinpath("schema/manifest.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def validate_schema(document: Any, name: str) -> None:
    """Report every schema violation at once, each with its path and a did-you-mean for unknown keys."""
    schema = manifest_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        problems = "; ".join(describe_schema_error(err) for err in errors)
        raise ManifestError(f"{name}: {len(errors)} schema problem(s): {problems}", "edit the manifest to match the schema in kvbake/schema/manifest.schema.json")


def check_semantics(document: dict, name: str) -> None:
    """Rules the schema cannot express: unique ids, needed dependencies, declared requirements, disjoint names."""
    problems = _chain_problems(document["chain"]) + _switch_problems(document["switches"], document["forbidden"])
    problems += _tag_problems(document["output"]["tag"])
    if problems:
        raise ManifestError(f"{name}: {'; '.join(problems)}", "correct the manifest entries named above")


def _chain_problems(chain: list[dict]) -> list[str]:
    problems: list[str] = []
    ids = [p["id"] for p in chain]
    for dup in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"chain: duplicate patch id {dup!r}")
    for index, patch in enumerate(chain):
        later = ids[index + 1:]
        needed_by = patch.get("needed_by", [])
        if patch["role"] == "dependency" and not needed_by:
            problems.append(f"chain[{index}] ({patch['id']}): a dependency patch must name what needs it in needed_by")
        for user in needed_by:
            if user not in later:
                where = "is not in the chain" if user not in ids else "does not come after it"
                problems.append(f"chain[{index}] ({patch['id']}): needed_by {user!r} {where}")
    return problems


def _switch_problems(switches: dict, forbidden: dict) -> list[str]:
    problems: list[str] = []
    for name in sorted(set(switches) & set(forbidden)):
        problems.append(f"switch {name} is both declared and forbidden")
    for name, spec in sorted(switches.items()):
        for needed in spec.get("requires", []):
            if needed not in switches:
                problems.append(f"switches.{name}.requires: {needed!r} is not a declared switch{did_you_mean(needed, list(switches))}")
            elif needed == name:
                problems.append(f"switches.{name}.requires: a switch cannot require itself")
        if spec.get("effect") == "kv_blocks_factor":
            problems += [f"switches.{name}.values: {value!r} is not an integer of at least 1 (effect kv_blocks_factor)"
                         for value in spec["values"] if not re.fullmatch(r"[1-9][0-9]{0,5}", value)]
    return problems


def _tag_problems(template: str) -> list[str]:
    import string

    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as err:
        return [f"output.tag: {err} in {template!r}"]
    problems = []
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in TAG_FIELDS:
            problems.append(f"output.tag: unknown field {{{field}}}; use {', '.join('{' + t + '}' for t in TAG_FIELDS)}")
        if spec or conversion:
            problems.append(f"output.tag: {{{field}}} may not carry a conversion or format spec")
    return problems


def image_sections(document: dict) -> dict:
    """What defines the image: base, donor, chain, switch declarations, forbidden names, output naming, title and
    licence; without the runtime sections and without prose."""
    kept = {key: value for key, value in document.items() if key not in RUNTIME_SECTIONS + PROSE_SECTIONS}
    kept["chain"] = [{k: v for k, v in entry.items() if k not in PROSE_KEYS} for entry in document["chain"]]
    kept["switches"] = {name: {k: v for k, v in spec.items() if k not in PROSE_KEYS} for name, spec in document["switches"].items()}
    return kept


def runtime_sections(document: dict) -> dict:
    """What a deploy passes to the ranks: the presets and the remote drafter's limits."""
    return {key: document[key] for key in RUNTIME_SECTIONS if key in document}


def section_sha256(section: dict) -> str:
    return hashlib.sha256(canonical_json(section)).hexdigest()


def freeze(document: dict, path: Path, sha256: str) -> Manifest:
    """Turn the validated document into frozen values, resolving patch paths inside the manifest's folder."""
    root = path.parent
    chain = tuple(
        ChainPatch(
            id=p["id"], file=p["file"], path=resolve_inside(root, p["file"], f"chain {p['id']} file"),
            role=p["role"], needed_by=tuple(p.get("needed_by", ())), summary=p.get("summary", ""),
        )
        for p in document["chain"]
    )
    switches = {
        name: Switch(name, tuple(s["values"]), tuple(s.get("requires", ())), s.get("summary", ""), s.get("effect"))
        for name, s in sorted(document["switches"].items())
    }
    presets = {name: _freeze_preset(name, p) for name, p in sorted(document["presets"].items())}
    drafter = document.get("drafter")
    return Manifest(
        path=path, sha256=sha256, image_sha256=section_sha256(image_sections(document)),
        runtime_sha256=section_sha256(runtime_sections(document)), name=document["name"], description=document.get("description", ""),
        standin=document.get("standin", False), licenses=document.get("licenses", "Apache-2.0"),
        base=BaseImage(**document["base"]), donor=Donor(**document["donor"]), chain=chain,
        switches=switches, forbidden=dict(sorted(document["forbidden"].items())),
        drafter_max_positions=drafter["max_positions"] if drafter else None,
        presets=presets, output=Output(**document["output"]),
    )


def _freeze_preset(name: str, spec: dict) -> Preset:
    return Preset(
        name=name, status=spec["status"], max_model_len=spec["max_model_len"],
        switches=dict(sorted(spec["switches"].items())), note=spec["note"],
        prefix_block=spec.get("prefix_block", 384), launcher_args=tuple(spec.get("launcher_args", ())),
    )
