"""A fake engine for the bake adapters' tests: images of real layer tars, save, load, copy-out and a recorded python3 run."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path
from typing import Any, Iterator

from tests.unit.fake_engine import FakeEngine

LAYER_MTIME = 1_600_000_000


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(entries: list[tuple[str, bytes | None, int]], uid: int | None = None, gid: int | None = None) -> bytes:
    """An uncompressed layer: (path, data or None for a folder, mode) entries, owned by this process's user."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = mode, LAYER_MTIME
            info.uid = os.getuid() if uid is None else uid
            info.gid = os.getgid() if gid is None else gid
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def apply_layer(files: dict[str, tuple[bytes, int]], layer: bytes) -> None:
    """Unpack one layer over `files` (path -> (data, mode)); `.wh.NAME` removes NAME."""
    with tarfile.open(fileobj=io.BytesIO(layer), mode="r:") as tar:
        for entry in tar:
            name = entry.name.removeprefix("./").rstrip("/")
            folder, _, base = name.rpartition("/")
            if base.startswith(".wh."):
                files.pop(f"{folder}/{base[4:]}".lstrip("/"), None)
            elif entry.isfile():
                handle = tar.extractfile(entry)
                files[name] = (handle.read() if handle else b"", entry.mode & 0o7777)


class BakeEngine(FakeEngine):
    """One engine holding layered images: `add_image` puts a base in; save, load, copy-out and run read the layers."""

    def __init__(self, name: str = "unix:///bake.sock", store: str = "classic") -> None:
        super().__init__(name, store)
        self.blobs: dict[str, bytes] = {}  # diff_id -> uncompressed layer
        self.configs_by_id: dict[str, bytes] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.python_answer: str | None = None  # None: the image has no python3; else run_python's stdout
        self.extra_files: dict[str, dict[str, tuple[bytes, int]]] = {}  # image ID -> path -> (data, mode), beyond its layers
        self.facts: dict[str, Any] = {"os_type": "linux", "architecture": "x86_64"}  # what `docker info` reports

    def ping(self) -> dict[str, Any]:
        self._up()
        self.calls.append(("ping",))
        return dict(self.facts)

    # --- images ------------------------------------------------------------------------------------------------------
    def add_image(self, reference: str, config: dict[str, Any], layers: list[bytes]) -> str:
        """Store the layers and a config naming them; returns the image ID (the config digest)."""
        config = {**config, "rootfs": {"type": "layers", "diff_ids": [digest(layer) for layer in layers]}}
        config_bytes = json.dumps(config, sort_keys=True).encode()
        return self._store(config_bytes, layers, [reference])

    def _store(self, config_bytes: bytes, layers: list[bytes], tags: list[str]) -> str:
        for layer in layers:
            self.blobs[digest(layer)] = layer
        config = json.loads(config_bytes)
        runtime = config.get("config") or {}
        image_id = digest(config_bytes)
        self.configs_by_id[image_id] = config_bytes
        self.images[image_id] = {
            "Id": image_id, "RepoTags": list(tags), "RepoDigests": [], "Architecture": config.get("architecture"),
            "Os": config.get("os"), "Variant": None, "RootFS": {"Layers": list(config["rootfs"]["diff_ids"])},
            "Config": {"Labels": dict(runtime.get("Labels") or {}), "Env": list(runtime.get("Env") or []),
                       "Entrypoint": runtime.get("Entrypoint"), "Cmd": runtime.get("Cmd"), "WorkingDir": "", "User": ""},
        }
        for tag in tags:
            self.tags[tag] = image_id
        return image_id

    def filesystem(self, reference: str) -> dict[str, tuple[bytes, int]]:
        """The image's files, its layers applied in order."""
        image_id = self.image_id_of(reference)
        assert image_id is not None, reference
        files: dict[str, tuple[bytes, int]] = {}
        for diff_id in self.images[image_id]["RootFS"]["Layers"]:
            apply_layer(files, self.blobs[diff_id])
        files.update(self.extra_files.get(image_id, {}))
        return files

    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        found = super().inspect_image(reference)
        return json.loads(json.dumps(found)) if found is not None else None

    def identify(self, reference: str) -> dict[str, Any] | None:
        found = self.inspect_image(reference)
        if found is not None:
            found["ConfigDigest"] = self.config_digest_of(found, reference)
        return found

    def remove_image(self, reference: str) -> None:
        self.calls.append(("remove_image", reference))
        image_id = self.image_id_of(reference)
        self.images.pop(image_id or "", None)
        self.tags = {tag: i for tag, i in self.tags.items() if i != image_id}

    def untag(self, reference: str) -> None:
        self.calls.append(("untag", reference))
        super().untag(reference)

    def tag(self, image_id: str, reference: str) -> None:
        self.calls.append(("tag", image_id, reference))
        super().tag(image_id, reference)

    def remember_manifest(self, data: bytes) -> str:
        self.calls.append(("remember_manifest", data))
        return digest(data)

    # --- save and load -----------------------------------------------------------------------------------------------
    def save_stream(self, reference: str) -> Iterator[bytes]:
        """A legacy `docker save`: manifest.json, the config and every layer tar, in chunks."""
        self.calls.append(("save", reference))
        image_id = self.image_id_of(reference)
        assert image_id is not None
        config_bytes = self.configs_by_id[image_id]
        layers = self.images[image_id]["RootFS"]["Layers"]
        members = [("manifest.json", json.dumps([{"Config": "config.json", "RepoTags": [reference],
                                                  "Layers": [f"{d[7:]}/layer.tar" for d in layers]}]).encode()),
                   ("config.json", config_bytes)]
        members += [(f"{d[7:]}/layer.tar", self.blobs[d]) for d in layers]
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        data = buffer.getvalue()
        return iter([data[i:i + 4096] for i in range(0, len(data), 4096)])

    def load(self, archive: Path) -> None:
        """A Docker load archive whose base layers the store already holds (by diff_id); the image stays untagged."""
        self.calls.append(("load", f"{archive.parent.name}/{archive.name}"))
        with tarfile.open(archive) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
        entry = json.loads(members["manifest.json"])[0]
        config_bytes = members[entry["Config"]]
        layers = [members[path] if path in members else self.blobs[f"sha256:{path.rsplit('/', 1)[1]}"] for path in entry["Layers"]]
        self._store(config_bytes, layers, [])

    # --- containers --------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def created_container(self, image: str) -> Iterator[str]:
        self.require_image(image)
        name = f"kvbake-extract-{len(self.calls)}"
        self.calls.append(("create", image, name))
        self.containers[name] = {"Id": name, "Name": name, "Image": self.image_id_of(image)}
        self.files[name] = {f"/{path}": data for path, (data, _) in self.filesystem(image).items()}
        self._modes = {**getattr(self, "_modes", {}), **{f"{name}:/{path}": mode for path, (_, mode) in self.filesystem(image).items()}}
        try:
            yield name
        finally:
            self.calls.append(("remove", name))
            self.containers.pop(name, None)
            self.files.pop(name, None)

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        """`docker cp --archive`: a file with its mode and the layer's time, a folder with everything below it; False when absent."""
        self.calls.append(("copy_out", container, path))
        files = self.files.get(container, {})
        if path in files:
            destination.write_bytes(files[path])
            destination.chmod(self._modes.get(f"{container}:{path}", 0o644))
            os.utime(destination, (LAYER_MTIME, LAYER_MTIME))
            return True
        prefix = path.rstrip("/") + "/"
        inside = {key[len(prefix):]: data for key, data in files.items() if key.startswith(prefix)}
        if not inside:
            return False
        for item, data in inside.items():
            (destination / item).parent.mkdir(parents=True, exist_ok=True)
            (destination / item).write_bytes(data)
        return True

    def run_python(self, image: str, code: str) -> str | None:
        self.calls.append(("run_python", image, code))
        return self.python_answer

    def legacy_build(self, context: Path, dockerfile: Path, tag: str) -> str:
        """`docker build`: the base the Dockerfile names plus a COPY layer of overlay/ and a RUN layer of whiteouts."""
        self.calls.append(("build", context.name, dockerfile.read_text(), tag))
        lines = dockerfile.read_text().splitlines()
        base = next(line.split()[1] for line in lines if line.startswith("FROM "))
        target = next(line.split()[-1] for line in lines if line.startswith("COPY "))
        copied = [(f"{target.strip('/')}/{p.relative_to(context / 'overlay')}", p.read_bytes(), p.stat().st_mode & 0o7777)
                  for p in sorted((context / "overlay").rglob("*")) if p.is_file()]
        text = dockerfile.read_text()
        labels = {json.loads(k): json.loads(v) for k, v in re.findall(r'("(?:[^"\\]|\\.)*")=("(?:[^"\\]|\\.)*")', text[text.index("LABEL "):])}
        removed = next((json.loads(line[4:])[2:] for line in lines if line.startswith("RUN ")), [])
        base_config = json.loads(self.configs_by_id[str(self.image_id_of(base))])
        runtime = dict(base_config.get("config") or {})
        runtime["Labels"] = {**(runtime.get("Labels") or {}), **labels}
        new_layers = [layer_tar(copied)]
        if removed:
            new_layers.append(layer_tar([(f"{p.strip('/').rpartition('/')[0]}/.wh.{p.rpartition('/')[2]}", b"", 0o644) for p in removed]))
        config = {**base_config, "config": runtime,
                  "rootfs": {"type": "layers", "diff_ids": [*base_config["rootfs"]["diff_ids"], *(digest(x) for x in new_layers)]}}
        return self._store(json.dumps(config, sort_keys=True).encode(), [*(self.blobs[d] for d in base_config["rootfs"]["diff_ids"]), *new_layers], [tag])
