"""Read a `docker save` stream of any engine in one pass: follow manifest.json/index.json, never file-name suffixes."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterable, Iterator

import zstandard

from kvbake.errors import BaseImageError

KEEP_BYTES = 1 << 20  # small members are kept whole: configs, manifests, indexes
PEEK_BYTES = 512
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
TAR_MAGIC_OFFSET = 257
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
CHUNK = 1 << 20


@dataclass(frozen=True)
class DirMeta:
    """A directory entry's metadata as a layer records it."""

    mode: int
    uid: int
    gid: int
    mtime: int


@dataclass(frozen=True)
class LayerScan:
    """One layer blob read through: its uncompressed digest and size, compression, and the wanted directories in it."""

    diff_id: str
    size: int
    compression: str
    dirs: dict[str, DirMeta]


@dataclass(frozen=True)
class SavedImage:
    """What a save stream says about its one image: config bytes, layer sizes, directories, and the store's manifest."""

    config_bytes: bytes
    config_digest: str
    diff_ids: tuple[str, ...]
    layer_sizes: tuple[int, ...]
    compressions: tuple[str, ...]
    dirs: dict[str, DirMeta]
    store_manifest: bytes | None
    layout: str

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(self.config_bytes)


def sniff(head: bytes) -> str:
    """What a blob's first bytes say it is: gzip, zstd, tar, or other."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if head[TAR_MAGIC_OFFSET:TAR_MAGIC_OFFSET + 5] == b"ustar":
        return "tar"
    return "other"


class _Prefixed(io.RawIOBase):
    """A read-only stream: the bytes already peeked, then the rest of the member."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head, self._rest = head, rest

    def readinto(self, buffer: Any) -> int:
        if self._head:
            count = min(len(buffer), len(self._head))
            buffer[:count], self._head = self._head[:count], self._head[count:]
            return count
        data = self._rest.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


class _Hashing(io.RawIOBase):
    """Counts and hashes what passes through: the uncompressed layer tar."""

    def __init__(self, source: BinaryIO) -> None:
        self._source, self.size, self.digest = source, 0, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._source.read(len(buffer))
        buffer[:len(data)] = data
        self.size += len(data)
        self.digest.update(data)
        return len(data)


def _decompressed(kind: str, stream: BinaryIO) -> BinaryIO:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=stream)  # type: ignore[return-value]
    if kind == "zstd":
        return zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)  # type: ignore[return-value]
    return stream


def scan_layer(kind: str, stream: BinaryIO, wanted_dirs: frozenset[str]) -> LayerScan:
    """Read one layer blob to its end: diff_id, uncompressed size, and the wanted directories' metadata."""
    plain = _Hashing(_decompressed(kind, stream))
    found: dict[str, DirMeta] = {}
    with tarfile.open(fileobj=io.BufferedReader(plain, CHUNK), mode="r|") as layer:
        for entry in layer:
            name = entry.name.removeprefix("./").rstrip("/")
            if entry.isdir() and name in wanted_dirs:
                found[name] = DirMeta(entry.mode & 0o7777, entry.uid, entry.gid, int(entry.mtime))
    while plain.read(CHUNK):
        pass
    return LayerScan(f"sha256:{plain.digest.hexdigest()}", plain.size, kind, found)


@dataclass
class _Collected:
    kept: dict[str, bytes]
    layers: dict[str, LayerScan]
    unreadable: dict[str, str]


def _collect(chunks: Iterable[bytes], wanted_dirs: frozenset[str]) -> _Collected:
    collected = _Collected({}, {}, {})
    reader = _IteratorReader(chunks)
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        for member in tar:
            if not member.isfile():
                continue
            handle = tar.extractfile(member)  # a regular file's: never None
            head = handle.read(PEEK_BYTES)  # type: ignore[union-attr]
            kind = sniff(head)
            if kind in ("gzip", "zstd", "tar"):
                collected.layers[member.name] = scan_layer(kind, _Prefixed(head, handle), wanted_dirs)  # type: ignore[arg-type]
            elif member.size <= KEEP_BYTES:
                collected.kept[member.name] = head + handle.read()  # type: ignore[union-attr]
            else:
                collected.unreadable[member.name] = head[:8].hex()
    reader.drain()
    return collected


def read_save(chunks: Iterable[bytes], reference: str, wanted_dirs: frozenset[str] = frozenset()) -> SavedImage:
    """One pass over a save stream; a truncated stream, a missing blob or an unknown compression is a BaseImageError."""
    try:
        collected = _collect(chunks, wanted_dirs)
    except (tarfile.TarError, EOFError, OSError, zlib.error, zstandard.ZstdError) as err:
        raise BaseImageError(f"the docker save stream of {reference} is truncated or corrupt ({type(err).__name__}: {err})",
                             "check the engine's disk and logs, then run the command again") from None
    return _resolve(collected, reference, wanted_dirs)


def _json(collected: _Collected, name: str, reference: str) -> Any:
    if name not in collected.kept:
        raise BaseImageError(f"the docker save of {reference} lacks {name}", "check the engine, then run the command again")
    try:
        return json.loads(collected.kept[name])
    except ValueError:
        raise BaseImageError(f"{name} in the docker save of {reference} is not JSON", "check the engine, then run the command again") from None


def _store_manifest(collected: _Collected, reference: str) -> bytes | None:
    """The image manifest that index.json points to (nested indexes followed), as the store holds it."""
    if "index.json" not in collected.kept:
        return None
    document = _json(collected, "index.json", reference)
    for _ in range(4):
        entries = [m for m in document.get("manifests") or []
                   if m.get("mediaType") in MANIFEST_TYPES + INDEX_TYPES and not is_attestation(m)]
        if len(entries) != 1:
            raise BaseImageError(f"index.json in the docker save of {reference} names {len(entries)} images, expected one",
                                 "save a single-platform image")
        path = blob_path(entries[0].get("digest", ""))
        data = collected.kept.get(path)
        if data is None or f"sha256:{hashlib.sha256(data).hexdigest()}" != entries[0]["digest"]:
            raise BaseImageError(f"the docker save of {reference} lacks blob {path} (or it does not match its digest)",
                                 "check the engine, then run the command again")
        if entries[0]["mediaType"] in MANIFEST_TYPES:
            return data
        document = json.loads(data)
    raise BaseImageError(f"index.json in the docker save of {reference} nests too deeply", "save a single-platform image")


def is_attestation(entry: dict) -> bool:
    """An index entry for BuildKit's provenance or SBOM attestations (the containerd store keeps them beside the image
    when BuildKit built it): not an image to read."""
    annotations = entry.get("annotations") or {}
    platform = entry.get("platform") or {}
    return (annotations.get("vnd.docker.reference.type") == "attestation-manifest"
            or (platform.get("os"), platform.get("architecture")) == ("unknown", "unknown"))


def blob_path(digest: str) -> str:
    algorithm, _, hexpart = digest.partition(":")
    return f"blobs/{algorithm}/{hexpart}"


def _scan_kept(data: bytes, path: str, reference: str, wanted_dirs: frozenset[str]) -> LayerScan:
    try:
        return scan_layer("tar", io.BytesIO(data), wanted_dirs)  # type: ignore[arg-type]
    except tarfile.TarError:
        raise BaseImageError(f"layer {path} in the docker save of {reference} has an unknown compression (starts {data[:8].hex()})",
                             "kvbake reads uncompressed, gzip and zstd layers; re-pull the base with one of those") from None


def _resolve(collected: _Collected, reference: str, wanted_dirs: frozenset[str]) -> SavedImage:
    entries = _json(collected, "manifest.json", reference)
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        raise BaseImageError(f"manifest.json in the docker save of {reference} does not describe one image", "save exactly one image")
    config_path, layer_paths = entries[0].get("Config"), list(entries[0].get("Layers") or [])
    if config_path not in collected.kept:
        raise BaseImageError(f"the docker save of {reference} lacks its config {config_path}", "check the engine, then run the command again")
    config_bytes = collected.kept[config_path]
    diff_ids = tuple((json.loads(config_bytes).get("rootfs") or {}).get("diff_ids") or ())
    scans = []
    for index, path in enumerate(layer_paths):
        if path in collected.unreadable:
            raise BaseImageError(f"layer {path} in the docker save of {reference} has an unknown compression (starts {collected.unreadable[path]})",
                                 "kvbake reads uncompressed, gzip and zstd layers; re-pull the base with one of those")
        scan = collected.layers.get(path)
        if scan is None and path in collected.kept:  # a small layer with no tar magic, e.g. the empty layer
            scan = _scan_kept(collected.kept[path], path, reference, wanted_dirs)
        if scan is None:
            raise BaseImageError(f"the docker save of {reference} lacks layer blob {path}", "check the engine, then run the command again")
        if index >= len(diff_ids) or scan.diff_id != diff_ids[index]:
            raise BaseImageError(f"layer {path} of the docker save of {reference} does not hash to the config's diff_id #{index + 1}",
                                 "the engine's copy of the image is damaged; remove and re-pull it")
        scans.append(scan)
    if len(scans) != len(diff_ids):
        raise BaseImageError(f"the docker save of {reference} lists {len(scans)} layers, its config {len(diff_ids)}", "check the engine")
    dirs: dict[str, DirMeta] = {}
    for scan in scans:
        dirs.update(scan.dirs)
    layout = "oci-layout" if "oci-layout" in collected.kept else "legacy"
    return SavedImage(config_bytes, f"sha256:{hashlib.sha256(config_bytes).hexdigest()}", diff_ids, tuple(s.size for s in scans),
                      tuple(s.compression for s in scans), dirs, _store_manifest(collected, reference), layout)


class _IteratorReader:
    """A minimal file object over an iterator of byte chunks, for tarfile's stream mode."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buffer = bytearray()

    def drain(self) -> None:
        """Consume the rest so the producing process can exit and close its pipe."""
        for _ in self._chunks:
            pass

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        if size < 0:
            size = len(self._buffer)
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data
