"""Adapter: the engine client over python-on-whales, with typed errors; it and containers.py alone talk to an engine."""

from __future__ import annotations

import contextlib
import os
import logging
import secrets
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException, NoSuchContainer, NoSuchImage
from python_on_whales.utils import run as run_cli

from kvbake.digests import sha256_digest
from kvbake.engines.adapters import manifestcache
from kvbake.engines.adapters.containers import ContainerOps
from kvbake.engines.core.archive_head import dir_meta_of, first_entry
from kvbake.engines.core.savefile import DirMeta
from kvbake.engines.core.containerd import StoreManifest, parse_store_manifest
from kvbake.engines.core.detection import EngineProfile, profile_from_info
from kvbake.engines.core.reach import unreachable_fix, unreachable_reason
from kvbake.errors import BaseImageError, EngineError, RegistryError
from kvbake.terminal import progress

log = logging.getLogger(__name__)


ManifestSource = Callable[[str], "bytes | None"]  # a manifest's bytes by its digest, or None


def quiet_or_streamed(call: Callable[..., Any], reference: str, label: str) -> None:
    """Run a pull or push quietly, or, where progress is shown, with docker's own lines as the step's detail."""
    with progress.step(label) as update:
        if not progress.shown():
            call(reference, quiet=True)
            return
        for _, line in call(reference, stream_logs=True):
            update(line)


def _stderr(err: DockerException) -> str:
    text = (err.stderr or err.stdout or "").strip().splitlines()
    return text[-1] if text else f"exit code {err.return_code}"


def _working_dir(value: Any) -> str:
    """The image's WorkingDir as the engine states it: python-on-whales turns an unset one ("") into Path(".")."""
    text = "" if value is None else str(value)
    return "" if text == "." else text


class Engine(ContainerOps):
    """One engine (local socket, unix:// or ssh://), with just the calls kvbake uses."""

    def __init__(self, host: str | None = None, config_dir: str | None = None) -> None:
        self.host = host
        self.client = DockerClient(host=host, config=config_dir)
        self.label = host or "the local docker engine"
        self._profile: EngineProfile | None = None

    def ping(self) -> dict[str, Any]:
        """Engine facts and profile; an unreachable engine is an EngineError with the fix, one older than 20.10 too.
        An operator's engine is the machine's own service: the fix never points to the developers' set-up."""
        unreachable = unreachable_fix(self.host)
        try:
            info = self.client.system.info()
            if not info.server_version:
                # docker-cli 26 (Debian 13) answers `info` with exit 0 and no server part when the engine is down;
                # `version` fails with the reason.
                self.client.version()
                raise EngineError(f"{self.label} is unreachable (docker info names no server)", unreachable)
        except DockerException as err:
            raise EngineError(f"{self.label} is unreachable ({unreachable_reason(self.host, self._reason(err))})", unreachable) from None
        facts = {"server_version": info.server_version, "driver": info.driver, "driver_status": info.driver_status,
                 "architecture": info.architecture, "os_type": info.os_type}
        self._profile = profile_from_info(facts, self.label)
        return {**facts, "profile": self._profile.name}

    def store_root(self) -> tuple[str, str]:
        """Where the engine keeps its data on its own host (`docker info` DockerRootDir) and its storage driver."""
        try:
            info = self.client.system.info()
        except DockerException as err:
            raise EngineError(f"{self.label}: docker info failed ({_stderr(err)})", "check the engine") from None
        return str(info.docker_root_dir or ""), str(info.driver or "")

    def system_time(self) -> str:
        """The engine's own clock (`docker info` SystemTime, RFC 3339): node locks age by it, never by this host's."""
        try:
            return str(self.client.system.info().system_time)
        except DockerException as err:
            raise EngineError(f"{self.label}: reading the engine's clock failed ({_stderr(err)})", "check that the node's engine is up") from None

    def _reason(self, err: DockerException) -> str:
        """The CLI's reason without the host it repeats ("… daemon at unix:///x.sock. …"): the label names it once."""
        reason = _stderr(err)
        return reason.replace(f" at {self.host}", "") if self.host else reason

    def profile(self) -> EngineProfile:
        """This engine's version and image store (asked once)."""
        if self._profile is None:
            self.ping()
        assert self._profile is not None
        return self._profile

    def remember_manifest(self, data: bytes) -> str:
        """Keep a manifest this engine's store holds (content-addressed, shared by every engine)."""
        return manifestcache.put(data)

    def store_manifest(self, image_id: str, reference: str, fetch: ManifestSource | None = None) -> StoreManifest:
        """The manifest behind a containerd-store image ID: from the cache, else from `fetch` (the registry, say; its
        bytes must hash to the ID), else read once from `docker save`."""
        data = manifestcache.get(image_id)
        if data is None and fetch is not None:
            fetched = fetch(image_id)
            if fetched is not None and sha256_digest(fetched) == image_id:
                data = fetched
                manifestcache.put(data)
        if data is None:
            from kvbake.engines.core.savefile import read_save

            log.info("reading the manifest of %s from docker save (once; cached afterwards)", reference)
            saved = read_save(self.save_stream(image_id), reference)
            if saved.store_manifest is None or sha256_digest(saved.store_manifest) != image_id:
                raise BaseImageError(f"{self.label} ({self.profile().name}) did not save the manifest {image_id[:19]} of {reference}",
                                     "check the engine's image store (docker info), then retry")
            data = saved.store_manifest
            manifestcache.put(data)
        return parse_store_manifest(data, reference)

    def config_digest_of(self, inspect: dict[str, Any], reference: str, fetch: ManifestSource | None = None) -> str:
        """kvbake's identity of a local image: its Id on the classic store, its manifest's config on the containerd store
        (the manifest from the cache, `fetch`, or one `docker save`)."""
        if self.profile().image_store.keeps_manifests:
            return self.store_manifest(inspect["Id"], reference, fetch).config_digest
        return str(inspect["Id"])

    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        """Plain inspect data for the pure checks, or None when the image is absent."""
        try:
            image = self.client.image.inspect(reference)
        except NoSuchImage:
            return None
        except DockerException as err:
            raise EngineError(f"{self.label}: inspect {reference} failed ({_stderr(err)})", "check the engine") from None
        config = image.config
        return {
            "Id": image.id, "RepoTags": list(image.repo_tags or []), "RepoDigests": list(image.repo_digests or []),
            "Architecture": image.architecture, "Os": image.os, "Variant": getattr(image, "variant", None),
            "RootFS": {"Layers": list(image.root_fs.layers or [])},
            "Config": {"Labels": dict(config.labels or {}), "Env": list(config.env or []),
                       "Entrypoint": config.entrypoint, "Cmd": config.cmd, "WorkingDir": _working_dir(config.working_dir),
                       "User": config.user},
        }

    def identify(self, reference: str) -> dict[str, Any] | None:
        """Inspect data plus `ConfigDigest`, kvbake's identity of the image on this engine's store."""
        found = self.inspect_image(reference)
        if found is not None:
            found["ConfigDigest"] = self.config_digest_of(found, reference)
        return found

    def require_image(self, reference: str) -> dict[str, Any]:
        found = self.inspect_image(reference)
        if found is None:
            raise BaseImageError(f"image {reference} is not present on {self.label} ({self.profile().name}; kvbake never pulls)",
                                 f"load or pull it yourself (docker pull {reference}), then retry")
        return found

    @contextlib.contextmanager
    def created_container(self, image: str, read_only_folder: tuple[str, str] | None = None) -> Iterator[str]:
        """A container that is created but never started; removed on exit, even on failure. `read_only_folder`
        (a folder of the engine's host, where it appears in the container) is bind-mounted read-only: `docker cp`
        reads it through the container without running anything."""
        self.require_image(image)
        name = f"kvbake-extract-{secrets.token_hex(6)}"
        mounts = [["type=bind", f"source={read_only_folder[0]}", f"target={read_only_folder[1]}", "readonly"]] if read_only_folder else []
        try:
            self.client.container.create(image, ["true"], name=name, networks=["none"], pull="never", mounts=mounts,
                                         labels={"org.kvbake.extract.pid": str(os.getpid())})
        except DockerException as err:
            raise EngineError(f"{self.label}: cannot create a container from {image} ({_stderr(err)})", "check the engine and the image") from None
        try:
            yield name
        finally:
            with contextlib.suppress(DockerException, NoSuchContainer):
                self.client.container.remove(name, force=True)

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        """Copy one path out with its owner (cp --archive); False when the path does not exist."""
        cmd = self.client.client_config.docker_cmd + ["container", "cp", "--archive", f"{container}:{path}", str(destination)]
        try:
            run_cli(cmd)
        except DockerException as err:
            message = _stderr(err)
            if "Could not find the file" in message or "No such container:path" in message:
                return False
            raise EngineError(f"{self.label}: copying {path} out failed ({message})", "check the engine") from None
        return True

    def dir_meta(self, container: str, path: str) -> DirMeta | None:
        """One directory's mode, owner and mtime from the head of `docker cp CONTAINER:PATH -` (the engine's own stat of
        the path, as the image's layers set it); the copy is stopped after its first entry. None when the path is
        absent or not a directory."""
        cmd = [*self.client.client_config.docker_cmd, "container", "cp", f"{container}:{path}", "-"]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as copy:
            assert copy.stdout is not None and copy.stderr is not None
            entry = first_entry(copy.stdout)
            if entry is not None:
                copy.kill()
            stderr = copy.stderr.read().decode(errors="replace").strip()
            status = copy.wait()
        if entry is None and status != 0:
            if "Could not find the file" in stderr or "No such container:path" in stderr:
                return None
            raise EngineError(f"{self.label}: reading {path} in {container} failed ({stderr or f'exit {status}'})", "check the engine")
        return dir_meta_of(entry)

    def save_stream(self, reference: str) -> Iterator[bytes]:
        """`docker save` as a byte stream (used once, at lock time, for the raw base config)."""
        try:
            return self.client.image.save(reference)
        except DockerException as err:
            raise EngineError(f"{self.label}: save {reference} failed ({_stderr(err)})", "check the engine") from None

    def load(self, archive: Path) -> None:
        try:
            self.client.image.load(archive, quiet=True)
        except DockerException as err:
            raise EngineError(f"{self.label}: load of the thin archive failed ({_stderr(err)})",
                              "check that the base image is present and unchanged, then rebuild") from None

    def tag(self, image_id: str, reference: str) -> None:
        try:
            self.client.image.tag(image_id, reference)
        except DockerException as err:
            raise EngineError(f"{self.label}: tag {reference} failed ({_stderr(err)})", "check the engine") from None

    def pull(self, reference: str) -> None:
        try:
            quiet_or_streamed(self.client.image.pull, reference, f"pull {progress.short_reference(reference)} on {self.label}")
        except DockerException as err:
            raise self._fail(f"pull {reference}", err) from None

    def image_id_of(self, reference: str) -> str | None:
        try:
            return self.client.image.inspect(reference).id
        except NoSuchImage:
            return None
        except DockerException as err:
            raise self._fail(f"inspect {reference}", err) from None

    def remove_image(self, reference: str) -> None:
        with contextlib.suppress(DockerException):  # NoSuchImage among them
            self.client.image.remove(reference, force=False, prune=True)

    def untag(self, reference: str, in_use_too: bool = False) -> None:
        """Remove one tag without touching other tags of the same image; a tag that is already gone is fine, any other
        refusal of the engine is an EngineError (a tag kvbake believes moved must have moved). With `in_use_too`, a
        tag whose image a container still runs goes as well (the image stays, untagged, until that container goes)."""
        try:
            self.client.image.remove(reference, force=in_use_too, prune=False)
        except NoSuchImage:
            return
        except DockerException as err:
            if "No such image" in (err.stderr or ""):
                return
            raise self._fail(f"untag {reference}", err) from None

    def tags_of_repository(self, repository: str) -> list[str]:
        """Every `repository:tag` reference this engine holds of one local repository, sorted."""
        try:
            images = self.client.image.list(repository_or_tag=repository)
        except DockerException as err:
            raise self._fail(f"list the images of {repository}", err) from None
        return sorted(tag for image in images for tag in image.repo_tags if tag.rpartition(":")[0] == repository)

    def ensure_empty_image(self, reference: str) -> None:
        """Make `reference` an image that holds no file (`docker import` of an empty archive), once per engine: the
        image of a marker container that outlives a command, so that it pins no release image."""
        if self.image_id_of(reference) is not None:
            return
        with tempfile.TemporaryDirectory(prefix="kvbake-empty-") as tmp:
            archive = Path(tmp) / "empty.tar"
            tarfile.open(archive, "w").close()
            try:
                self.client.image.import_(archive, tag=reference)
            except DockerException as err:
                raise self._fail(f"import {reference}", err) from None

    def config_dir(self) -> str | None:
        """The login store folder this client passes as --config (None: DOCKER_CONFIG or ~/.docker)."""
        config = self.client.client_config.config
        return str(config) if config is not None else None

    def push(self, reference: str) -> None:
        """`docker push` of one tag; the engine uses the client's login store and skips blobs the registry has."""
        try:
            quiet_or_streamed(self.client.image.push, reference, f"push {progress.short_reference(reference)}")
        except DockerException as err:
            raise RegistryError(f"{self.label}: push of {reference} failed ({_stderr(err)})",
                                "check that the registry is up and that you are logged in (docker login), then push again; "
                                "blobs already uploaded are skipped") from None

    def legacy_build(self, context: Path, dockerfile: Path, tag: str) -> str:
        """`docker build` with the classic builder, no network; returns the image ID. DOCKER_BUILDKIT=0 keeps it classic
        where a buildx plugin is installed (Debian 13's docker.io), since BuildKit resolves `FROM sha256:…` remotely."""
        config = self.client.client_config
        classic = DockerClient(host=self.host, config=config.config, client_call=["env", "DOCKER_BUILDKIT=0", *config.client_call])
        try:
            image = classic.legacy_build(context, file=dockerfile, tags=[tag], network="none", pull=False, cache=False)
        except DockerException as err:
            raise EngineError(f"{self.label}: docker build failed ({_stderr(err)})", "read the build output with --debug") from None
        return image.id

    def run_python(self, image: str, code: str) -> str | None:
        """Run the image's own python3 on `code` with no network; stdout, or None when the image has no python3."""
        try:
            return self.client.run(image, ["-c", code], entrypoint="python3", networks=["none"], remove=True, user="0", pull="never")
        except DockerException as err:
            if err.return_code in (126, 127):
                return None
            raise EngineError(f"{self.label}: running python3 in {image} failed ({_stderr(err)})", "check that the image has python3") from None
