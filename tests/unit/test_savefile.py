"""Tests of the save-stream reader: every engine's `docker save` format, compressed layers, and damaged streams."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest
import zstandard

from kvbake.digests import canonical_json, sha256_digest
from kvbake.errors import BaseImageError
from kvbake.engines.core.savefile import DirMeta, is_attestation, read_save, sniff

WANTED = frozenset({"usr", "usr/lib", "usr/lib/py"})


def _add(tar: tarfile.TarFile, name: str, data: bytes | None, mode: int = 0o644, mtime: int = 1_700_000_000) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = mtime
    if data is None:
        info.type, info.mode = tarfile.DIRTYPE, mode
        tar.addfile(info)
    else:
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))


def layer(*entries: tuple[str, bytes | None, int]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data, mode in entries:
            _add(tar, name, data, mode)
    return buffer.getvalue()


LOWER = layer(("usr", None, 0o755), ("usr/lib", None, 0o755), ("usr/lib/py", None, 0o750), ("usr/lib/py/a.py", b"a = 1\n", 0o644))
UPPER = layer(("usr/lib/py", None, 0o700), ("usr/lib/py/b.py", b"b = 2\n", 0o644))
LAYERS = (LOWER, UPPER)
CONFIG = canonical_json({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [sha256_digest(x) for x in LAYERS]}})


def archive(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members:
            _add(tar, name, data)
    return buffer.getvalue()


def legacy_save() -> bytes:
    """Engines before 25: <id>/layer.tar, <config hex>.json, manifest.json last."""
    config_name = sha256_digest(CONFIG).split(":")[1] + ".json"
    paths = [f"{i}{'0' * 63}/layer.tar" for i in range(len(LAYERS))]
    manifest = [{"Config": config_name, "RepoTags": ["x:1"], "Layers": paths}]
    return archive([*zip(paths, LAYERS), (config_name, CONFIG), ("manifest.json", json.dumps(manifest).encode())])


def oci_save(compress=lambda data: data, media="application/vnd.oci.image.layer.v1.tar", layers=LAYERS, config=CONFIG) -> tuple[bytes, bytes]:
    """Engines from 25 and the containerd store: blobs/sha256/<hex> and index.json, with manifest.json pointing in."""
    blobs = [compress(x) for x in layers]
    store_manifest = canonical_json({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                     "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256_digest(config), "size": len(config)},
                                     "layers": [{"mediaType": media, "digest": sha256_digest(b), "size": len(b)} for b in blobs]})
    index = {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                                "digest": sha256_digest(store_manifest), "size": len(store_manifest)}]}
    path = lambda data: "blobs/sha256/" + sha256_digest(data).split(":")[1]  # noqa: E731
    docker_manifest = [{"Config": path(config), "RepoTags": ["x:1"], "Layers": [path(b) for b in blobs]}]
    members = sorted([(path(b), b) for b in (*blobs, config, store_manifest)])
    members += [("index.json", json.dumps(index).encode()), ("manifest.json", json.dumps(docker_manifest).encode()), ("oci-layout", b"{}")]
    return archive(members), store_manifest


ATTESTATION_PLATFORM = {"os": "unknown", "architecture": "unknown"}


def with_attestation(data: bytes, store_manifest: bytes, platforms: int = 1, marks: tuple[str, ...] = ("annotation", "platform")) -> bytes:
    """The save as the containerd store writes a BuildKit-built image: index.json names an image index holding the
    image manifest (once per platform) and BuildKit's attestation manifest, marked by `marks`: its annotation, its
    platform unknown/unknown, or both (as BuildKit writes it)."""
    manifest_digest = sha256_digest(store_manifest)
    attestation = canonical_json({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "layers": []})
    image = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": len(store_manifest)}
    entries = [{**image, "platform": {"os": "linux", "architecture": arch}} for arch in ("amd64", "arm64")[:platforms]]
    entry = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha256_digest(attestation), "size": len(attestation)}
    if "platform" in marks:
        entry["platform"] = ATTESTATION_PLATFORM
    if "annotation" in marks:
        entry["annotations"] = {"vnd.docker.reference.type": "attestation-manifest", "vnd.docker.reference.digest": manifest_digest}
    entries.append(entry)
    nested = canonical_json({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries})
    top = {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json",
                                               "digest": sha256_digest(nested), "size": len(nested)}]}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        kept = [(m.name, tar.extractfile(m).read()) for m in tar if m.isfile() and m.name != "index.json"]
    path = lambda blob: "blobs/sha256/" + sha256_digest(blob).split(":")[1]  # noqa: E731
    return archive(sorted(kept + [(path(attestation), attestation), (path(nested), nested)]) + [("index.json", json.dumps(top).encode())])


def chunks(data: bytes, size: int = 700):
    return (data[i:i + size] for i in range(0, len(data), size))


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


@pytest.mark.parametrize("make", [legacy_save, lambda: oci_save()[0], lambda: oci_save(gzip.compress)[0], lambda: oci_save(zstd)[0]],
                         ids=["engine-20.10", "engine-25-oci-layout", "containerd-gzip", "containerd-zstd"])
def test_every_save_format_gives_the_same_config_sizes_and_directories(make) -> None:
    saved = read_save(chunks(make()), "x:1", WANTED)
    assert saved.config_bytes == CONFIG and saved.config_digest == sha256_digest(CONFIG)
    assert saved.layer_sizes == tuple(len(x) for x in LAYERS)
    assert saved.dirs == {"usr": DirMeta(0o755, 0, 0, 1_700_000_000), "usr/lib": DirMeta(0o755, 0, 0, 1_700_000_000),
                          "usr/lib/py": DirMeta(0o700, 0, 0, 1_700_000_000)}  # the topmost layer wins


def test_buildkits_attestation_manifest_beside_the_image_is_not_an_image() -> None:
    data, store_manifest = oci_save(gzip.compress, "application/vnd.oci.image.layer.v1.tar+gzip")
    saved = read_save(chunks(with_attestation(data, store_manifest)), "x:1")
    assert saved.store_manifest == store_manifest and saved.config_digest == sha256_digest(CONFIG)


@pytest.mark.parametrize("marks", [("annotation",), ("platform",)], ids=["annotation-only", "platform-only"])
def test_either_mark_alone_tells_an_attestation_from_an_image(marks) -> None:
    data, store_manifest = oci_save(gzip.compress, "application/vnd.oci.image.layer.v1.tar+gzip")
    saved = read_save(chunks(with_attestation(data, store_manifest, marks=marks)), "x:1")
    assert saved.store_manifest == store_manifest and saved.config_digest == sha256_digest(CONFIG)
    with pytest.raises(BaseImageError, match=r"names 2 images, expected one"):
        read_save(chunks(with_attestation(data, store_manifest, marks=())), "x:1")  # unmarked: a second image


@pytest.mark.parametrize(("entry", "attestation"), [
    ({"platform": ATTESTATION_PLATFORM, "annotations": {"vnd.docker.reference.type": "attestation-manifest"}}, True),
    ({"platform": ATTESTATION_PLATFORM}, True),
    ({"annotations": {"vnd.docker.reference.type": "attestation-manifest"}}, True),
    ({"platform": {"os": "linux", "architecture": "unknown"}}, False),
    ({"platform": {"os": "unknown", "architecture": "amd64"}}, False),
    ({"platform": {"os": "linux", "architecture": "amd64"}, "annotations": {"vnd.docker.reference.type": "sbom"}}, False),
    ({}, False),
])
def test_an_index_entry_is_an_attestation_by_its_annotation_or_its_unknown_platform(entry, attestation) -> None:
    assert is_attestation({"mediaType": "application/vnd.oci.image.manifest.v1+json", **entry}) is attestation


def test_an_index_of_two_platforms_is_refused_even_beside_an_attestation() -> None:
    data, store_manifest = oci_save(gzip.compress, "application/vnd.oci.image.layer.v1.tar+gzip")
    with pytest.raises(BaseImageError) as caught:
        read_save(chunks(with_attestation(data, store_manifest, platforms=2)), "x:1")
    assert caught.value.exit_code == 6
    assert all(field in caught.value.message for field in ("index.json", "x:1", "2 images"))
    assert "single-platform" in caught.value.fix


def test_the_oci_layout_yields_the_store_manifest_and_names_compression() -> None:
    data, store_manifest = oci_save(gzip.compress, "application/vnd.oci.image.layer.v1.tar+gzip")
    saved = read_save(chunks(data), "x:1")
    assert saved.store_manifest == store_manifest and saved.compressions == ("gzip", "gzip") and saved.layout == "oci-layout"
    assert read_save(chunks(legacy_save()), "x:1").store_manifest is None


def test_a_truncated_stream_is_a_clean_error() -> None:
    data = oci_save(lambda raw: gzip.compress(raw, mtime=0))[0]  # a fixed header: the cut lands on the same bytes every run
    with pytest.raises(BaseImageError, match=r"docker save stream of x:1 is truncated or corrupt"):
        read_save(chunks(data[: len(data) // 3]), "x:1")


def test_a_missing_layer_blob_is_named() -> None:
    data = legacy_save()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        kept = [(m.name, tar.extractfile(m).read()) for m in tar if m.isfile() and not m.name.startswith("1")]
    with pytest.raises(BaseImageError, match=r"lacks layer blob 10{63}/layer.tar"):
        read_save(chunks(archive(kept)), "x:1")


def test_a_layer_of_unknown_compression_is_named() -> None:
    big = layer(("usr", None, 0o755), ("usr/big", bytes(range(256)) * 8192, 0o644))
    config = canonical_json({"rootfs": {"type": "layers", "diff_ids": [sha256_digest(big)]}})
    data = oci_save(lambda x: b"BZh91AY&SY" + x, layers=(big,), config=config)[0]
    with pytest.raises(BaseImageError, match=r"has an unknown compression \(starts 425a683931415926\)"):
        read_save(chunks(data), "x:1")


def test_a_layer_that_does_not_hash_to_its_diff_id_is_refused() -> None:
    data = legacy_save().replace(b"b = 2\n", b"b = 3\n")
    with pytest.raises(BaseImageError, match=r"does not hash to the config's diff_id #2"):
        read_save(chunks(data), "x:1")


def test_sniff_reads_magic_bytes_not_names() -> None:
    assert sniff(b"\x1f\x8b\x08") == "gzip" and sniff(b"\x28\xb5\x2f\xfd") == "zstd"
    assert sniff(LOWER[:512]) == "tar" and sniff(b'{"schemaVersion":2}') == "other"


def legacy_members() -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(legacy_save())) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar if m.isfile()]


def with_manifest(entries) -> bytes:
    return archive([*(m for m in legacy_members() if m[0] != "manifest.json"), ("manifest.json", json.dumps(entries).encode())])


def test_the_layout_and_the_layers_diff_ids_and_compressions_are_reported() -> None:
    legacy = read_save(chunks(legacy_save()), "x:1", WANTED)
    oci = read_save(chunks(oci_save(gzip.compress)[0]), "x:1", WANTED)
    assert (legacy.layout, oci.layout) == ("legacy", "oci-layout")
    assert legacy.diff_ids == oci.diff_ids == tuple(sha256_digest(x) for x in LAYERS)
    assert oci.compressions == ("gzip", "gzip") and legacy.compressions == ("tar", "tar")


@pytest.mark.parametrize("entries", [[], {"Config": "x"}, [{"Config": "a"}, {"Config": "b"}], ["not an object"]],
                         ids=["none", "not-a-list", "two-images", "not-an-object"])
def test_a_manifest_json_that_does_not_describe_one_image_is_refused(entries) -> None:
    with pytest.raises(BaseImageError) as caught:
        read_save(chunks(with_manifest(entries)), "x:1")
    assert "manifest.json" in caught.value.message and "one image" in caught.value.message and caught.value.exit_code == 6


def test_a_save_that_lacks_its_config_or_its_manifest_is_named() -> None:
    config_name = sha256_digest(CONFIG).split(":")[1] + ".json"
    without_config = archive([m for m in legacy_members() if m[0] != config_name])
    with pytest.raises(BaseImageError) as caught:
        read_save(chunks(without_config), "x:1")
    assert f"lacks its config {config_name}" in caught.value.message and caught.value.exit_code == 6
    with pytest.raises(BaseImageError) as caught:
        read_save(chunks(archive([m for m in legacy_members() if m[0] != "manifest.json"])), "x:1")
    assert "lacks manifest.json" in caught.value.message


def test_a_config_that_names_more_layers_than_the_save_holds_is_refused() -> None:
    config = canonical_json({"rootfs": {"type": "layers", "diff_ids": [sha256_digest(x) for x in LAYERS] + ["sha256:" + "0" * 64]}})
    with pytest.raises(BaseImageError) as caught:
        read_save(chunks(oci_save(config=config)[0]), "x:1")
    assert "2 layers, its config 3" in caught.value.message and caught.value.exit_code == 6
