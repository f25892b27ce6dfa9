"""The save-stream reader's finer points: index.json followed and checked, directory names kept exact, layer checks, chunk reads."""

from __future__ import annotations

import io
import json
import tarfile

from kvbake.digests import canonical_json, sha256_digest
from kvbake.engines.core.savefile import DirMeta, _IteratorReader, read_save

from message_words import says
from test_savefile import WANTED, archive, chunks, layer, legacy_members, oci_save, with_manifest
from test_savefile_streams import config_of, refusal

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MTIME = 1_700_000_000


def members_of(data: bytes) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar if m.isfile()]


def with_member(data: bytes, name: str, content: bytes) -> bytes:
    """The save with member `name` holding `content` (added at the end when the save lacks it)."""
    members = dict(members_of(data))
    members[name] = content
    return archive(list(members.items()))


def with_index(data: bytes, *entries: dict, blobs: tuple[bytes, ...] = ()) -> bytes:
    """The save with index.json naming `entries`, and `blobs` added under blobs/sha256/."""
    members = [m for m in members_of(data) if m[0] != "index.json"]
    members += [("blobs/sha256/" + sha256_digest(blob).split(":")[1], blob) for blob in blobs]
    return archive([*members, ("index.json", json.dumps({"schemaVersion": 2, "manifests": list(entries)}).encode())])


def nested_save(depth: int) -> tuple[bytes, bytes]:
    """An OCI save whose index.json reaches the image manifest through `depth` nested image indexes."""
    data, store_manifest = oci_save()
    target = {"mediaType": OCI_MANIFEST, "digest": sha256_digest(store_manifest), "size": len(store_manifest)}
    nested = []
    for _ in range(depth):
        blob = canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [target]})
        nested.append(blob)
        target = {"mediaType": OCI_INDEX, "digest": sha256_digest(blob), "size": len(blob)}
    return with_index(data, target, blobs=tuple(nested)), store_manifest


def blob_name(data: bytes) -> str:
    return "blobs/sha256/" + sha256_digest(data).split(":")[1]


# --- index.json -----------------------------------------------------------------------------------------------


def test_an_image_manifest_three_indexes_deep_is_found():
    data, store_manifest = nested_save(3)
    assert read_save(chunks(data), "x:1").store_manifest == store_manifest


def test_an_image_manifest_four_indexes_deep_is_refused_as_nesting_too_deeply():
    error = refusal(nested_save(4)[0])
    assert says(error.message, "index.json") and says(error.message, "nests too deeply")
    assert says(error.fix, "save a single-platform image")


def test_an_index_json_that_is_not_json_is_named_with_the_image():
    error = refusal(with_member(oci_save()[0], "index.json", b"{half"))
    assert says(error.message, "index.json") and says(error.message, "is not JSON")


def test_an_index_entry_whose_blob_is_absent_names_the_blob_and_the_fix():
    absent = "sha256:" + "0" * 64
    error = refusal(with_index(oci_save()[0], {"mediaType": OCI_MANIFEST, "digest": absent, "size": 3}))
    assert says(error.message, "lacks blob blobs/sha256/" + "0" * 64)
    assert says(error.fix, "check the engine, then run the command again")


def test_an_index_entry_whose_blob_does_not_hash_to_its_digest_is_refused():
    data, store_manifest = oci_save()
    error = refusal(with_member(data, blob_name(store_manifest), store_manifest + b" "))
    assert says(error.message, "lacks blob " + blob_name(store_manifest)) and says(error.message, "does not match its digest")


def test_an_index_entry_without_a_digest_is_a_missing_blob_of_no_name_not_a_crash():
    error = refusal(with_index(oci_save()[0], {"mediaType": OCI_MANIFEST, "size": 3}))
    assert says(error.message, "lacks blob blobs//")


# --- layers ---------------------------------------------------------------------------------------------------


def test_a_layer_of_unknown_compression_is_refused_with_the_formats_kvbake_reads():
    big = layer(("usr", None, 0o755), ("usr/big", bytes(range(256)) * 8192, 0o644))
    data = oci_save(lambda x: b"BZh91AY&SY" + x, layers=(big,), config=config_of((big,)))[0]
    error = refusal(data)
    assert says(error.message, "has an unknown compression") and says(error.fix, "kvbake reads uncompressed, gzip and zstd layers")


def test_a_small_layer_that_is_no_tar_is_named_by_its_path():
    junk = b"PK\x03\x04 not a tar " * 40
    data, _ = oci_save(layers=(junk,), config=config_of((junk,)))
    assert says(refusal(data).message, f"layer {blob_name(junk)} in the docker save")


def v7(tar: bytes) -> bytes:
    """A tar of directories only, rewritten as the old v7 format writes it: no ustar magic in any header."""
    out = bytearray(tar)
    for start in range(0, len(out), 512):
        block = out[start:start + 512]
        if any(block):  # a header: directories carry no data blocks
            block[257:265] = bytes(8)
            block[148:156] = b" " * 8
            block[148:156] = b"%06o\0 " % sum(block)
            out[start:start + 512] = block
    return bytes(out)


def test_a_small_layer_without_tar_magic_yields_its_wanted_directories():
    old = v7(layer(("usr", None, 0o755), ("usr/lib", None, 0o750)))
    data, _ = oci_save(layers=(old,), config=config_of((old,)))
    saved = read_save(chunks(data), "x:1", WANTED)
    assert saved.compressions == ("tar",)
    assert saved.dirs == {"usr": DirMeta(0o755, 0, 0, MTIME), "usr/lib": DirMeta(0o750, 0, 0, MTIME)}


def test_a_save_that_lists_more_layers_than_its_config_is_refused_at_the_first_layer_too_many():
    members = dict(legacy_members())
    config_name = next(name for name in members if name.endswith(".json") and name != "manifest.json")
    paths = json.loads(members["manifest.json"])[0]["Layers"]
    error = refusal(with_manifest([{"Config": config_name, "Layers": [*paths, paths[0]]}]))
    assert says(error.message, "diff_id #3")


def test_a_truncated_stream_names_the_kind_of_failure():
    data, _ = oci_save()
    assert says(refusal(data[: len(data) // 2]).message, "ReadError")


# --- directory names --------------------------------------------------------------------------------------------


def test_a_directory_name_loses_only_its_trailing_slashes():
    odd = layer(("usr", None, 0o755), ("usr ", None, 0o700), ("usr/libX", None, 0o711))
    data, _ = oci_save(layers=(odd,), config=config_of((odd,)))
    saved = read_save(chunks(data), "x:1", frozenset({"usr", "usr/libX"}))
    assert saved.dirs == {"usr": DirMeta(0o755, 0, 0, MTIME), "usr/libX": DirMeta(0o711, 0, 0, MTIME)}


def test_a_long_directory_name_with_a_doubled_trailing_slash_is_found():
    name = "usr/" + "d" * 120
    info = tarfile.TarInfo(name + "//")  # GNU tar's long name; Python's tarfile strips one trailing slash only
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o751, MTIME
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(info)
    gnu = buffer.getvalue()
    data, _ = oci_save(layers=(gnu,), config=config_of((gnu,)))
    assert read_save(chunks(data), "x:1", frozenset({name})).dirs == {name: DirMeta(0o751, 0, 0, MTIME)}


# --- the chunk reader -------------------------------------------------------------------------------------------


def counted(*parts: bytes) -> tuple[_IteratorReader, list[bytes]]:
    """A reader over `parts`, and the list of the parts it has pulled so far."""
    pulled: list[bytes] = []

    def source():
        for part in parts:
            pulled.append(part)
            yield part
    return _IteratorReader(source()), pulled


def test_a_read_pulls_chunks_only_until_it_holds_enough():
    reader, pulled = counted(b"ab", b"cd", b"ef")
    assert reader.read(2) == b"ab" and pulled == [b"ab"]
    assert reader.read(3) == b"cde" and len(pulled) == 3


def test_a_read_of_nothing_returns_nothing_and_pulls_nothing():
    reader, pulled = counted(b"abcd", b"ef")
    assert reader.read(1) == b"a"
    assert reader.read(0) == b"" and pulled == [b"abcd"]
    assert reader.read() == b"bcdef"


def test_a_read_past_the_end_gives_what_is_left_then_empty_bytes():
    reader, _ = counted(b"ab")
    assert reader.read(5) == b"ab" and reader.read(5) == b""
