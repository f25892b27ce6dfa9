"""The manifest cache: where it lives, entries named by their own digest, and entries that do not hash to it ignored."""

from __future__ import annotations

from pathlib import Path

from kvbake.digests import sha256_digest
from kvbake.engines.adapters import manifestcache


def test_the_cache_folder_is_kvbake_cache_dir_else_xdg_cache_home_else_the_home_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("KVBAKE_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert manifestcache.cache_root() == tmp_path / "mine"
    monkeypatch.setenv("KVBAKE_CACHE_DIR", "")
    assert manifestcache.cache_root() == tmp_path / "xdg" / "kvbake"
    monkeypatch.delenv("KVBAKE_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert manifestcache.cache_root() == tmp_path / "home" / ".cache" / "kvbake"


def test_an_entry_is_stored_under_its_algorithm_and_hex_and_read_back(monkeypatch, tmp_path):
    monkeypatch.setenv("KVBAKE_CACHE_DIR", str(tmp_path))
    data = b'{"schemaVersion": 2}'
    digest = sha256_digest(data)
    assert manifestcache.get(digest) is None
    assert manifestcache.put(data) == digest
    assert (tmp_path / "manifests" / "sha256" / digest.split(":")[1]).read_bytes() == data
    assert manifestcache.get(digest) == data
    assert manifestcache.put(data) == digest and manifestcache.get(digest) == data


def test_an_entry_whose_bytes_do_not_hash_to_its_name_is_ignored_and_rewritten(monkeypatch, tmp_path):
    monkeypatch.setenv("KVBAKE_CACHE_DIR", str(tmp_path))
    data = b"manifest"
    digest = sha256_digest(data)
    path = Path(tmp_path / "manifests" / "sha256" / digest.split(":")[1])
    path.parent.mkdir(parents=True)
    path.write_bytes(b"damaged")
    assert manifestcache.get(digest) is None
    manifestcache.put(data)
    assert path.read_bytes() == data
