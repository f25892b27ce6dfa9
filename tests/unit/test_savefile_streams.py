"""The save-stream reader on less common save shapes (zstd frames, big layers, ./ names) and each refusal's fix."""

from __future__ import annotations

import json

import pytest
import zstandard

from kvbake.digests import canonical_json, sha256_digest
from kvbake.engines.core.savefile import KEEP_BYTES, read_save, sniff
from kvbake.errors import BaseImageError

from message_words import says
from test_savefile import LAYERS, WANTED, archive, chunks, layer, legacy_members, oci_save, with_manifest


def config_of(layers, padding: int = 0) -> bytes:
    data = canonical_json({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [sha256_digest(x) for x in layers]}})
    return data + b" " * padding


def test_a_layer_of_several_zstd_frames_is_read_across_them() -> None:
    def frames(data: bytes) -> bytes:
        half = len(data) // 2
        return zstandard.ZstdCompressor().compress(data[:half]) + zstandard.ZstdCompressor().compress(data[half:])
    data, _ = oci_save(frames)
    saved = read_save(chunks(data), "x:1", WANTED)
    assert saved.diff_ids == tuple(sha256_digest(x) for x in LAYERS) and saved.compressions == ("zstd", "zstd")


def test_an_uncompressed_layer_larger_than_the_kept_size_is_scanned() -> None:
    big = layer(("usr", None, 0o755), ("usr/big.bin", b"\x01" * (KEEP_BYTES + 4096), 0o644))
    data, _ = oci_save(layers=(big,), config=config_of((big,)))
    saved = read_save(chunks(data, 1 << 16), "x:1", WANTED)
    assert saved.layer_sizes == (len(big),) and saved.compressions == ("tar",) and saved.dirs["usr"].mode == 0o755


def test_folder_entries_of_the_save_are_passed_over_and_dot_slash_names_are_found() -> None:
    dotted = layer(("./usr", None, 0o711), ("./usr/lib", None, 0o755), ("./usr/lib/x.py", b"x", 0o644))
    config = config_of((dotted,))
    config_name = sha256_digest(config).split(":")[1] + ".json"
    manifest = [{"Config": config_name, "RepoTags": ["x:1"], "Layers": ["0" * 64 + "/layer.tar"]}]
    data = archive([("0" * 64, None), ("0" * 64 + "/layer.tar", dotted), (config_name, config), ("manifest.json", json.dumps(manifest).encode())])
    saved = read_save(chunks(data), "x:1", WANTED)
    assert set(saved.dirs) == {"usr", "usr/lib"} and saved.dirs["usr"].mode == 0o711 and saved.layout == "legacy"


def test_a_member_exactly_as_large_as_the_kept_size_is_kept() -> None:
    config = config_of(LAYERS, 0)
    config += b" " * (KEEP_BYTES - len(config))
    assert len(config) == KEEP_BYTES
    data, _ = oci_save(config=config)
    assert read_save(chunks(data, 1 << 16), "x:1", WANTED).config_bytes == config


def test_the_tar_magic_counts_at_its_offset_only() -> None:
    assert sniff(b"\0" * 257 + b"ustar") == "tar"
    assert sniff(b"\0" * 257 + b"usta") == "other" and sniff(b"\0" * 256 + b"ustar") == "other"


def refusal(data: bytes) -> BaseImageError:
    with pytest.raises(BaseImageError) as caught:
        read_save(chunks(data), "x:1", WANTED)
    assert caught.value.exit_code == 6 and says(caught.value.message, "x:1")
    return caught.value


def test_each_refusal_says_what_to_do() -> None:
    data, _ = oci_save()
    assert refusal(data[: len(data) // 2]).fix.startswith("check the engine's disk and logs")
    assert refusal(archive([("other.json", b"{}")])).fix.startswith("check the engine, then run the command again")
    assert refusal(archive([("manifest.json", b"{half")])).fix.startswith("check the engine, then run the command again")
    assert refusal(with_manifest([{"Config": "c.json"}, {"Config": "d.json"}])).fix.startswith("save exactly one image")
    assert refusal(with_manifest([{"Config": "absent.json", "Layers": []}])).fix.startswith("check the engine, then run the command again")


def test_a_layer_the_config_does_not_name_or_names_otherwise_is_refused_with_the_fix() -> None:
    members = dict(legacy_members())
    config_name = next(name for name in members if name.endswith(".json") and name != "manifest.json")
    paths = json.loads(members["manifest.json"])[0]["Layers"]
    error = refusal(with_manifest([{"Config": config_name, "Layers": [paths[1], paths[0]]}]))
    assert says(error.message, "diff_id #1") and error.fix.startswith("the engine's copy of the image is damaged")
    error = refusal(with_manifest([{"Config": config_name, "Layers": [paths[0]]}]))
    assert says(error.message, "lists 1 layers, its config 2") and says(error.fix, "check the engine")
    error = refusal(with_manifest([{"Config": config_name, "Layers": [*paths, "absent/layer.tar"]}]))
    assert says(error.message, "lacks layer blob absent/layer.tar") and error.fix.startswith("check the engine, then run")


def test_a_small_layer_without_tar_magic_is_read_as_a_tar_and_one_that_is_none_is_named() -> None:
    empty = b"\0" * 1024  # the empty layer: two zero blocks, no header to carry the magic
    data, _ = oci_save(layers=(empty,), config=config_of((empty,)))
    saved = read_save(chunks(data), "x:1", WANTED)
    assert saved.diff_ids == (sha256_digest(empty),) and saved.dirs == {}
    assert saved.compressions == ("tar",)
    junk = b"PK\x03\x04 not a tar " * 40
    data, _ = oci_save(layers=(junk,), config=config_of((junk,)))
    error = refusal(data)
    assert says(error.message, f"has an unknown compression (starts {junk[:8].hex()})")
    assert error.fix.startswith("kvbake reads uncompressed, gzip and zstd layers")
