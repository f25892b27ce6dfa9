"""The bake's I/O: the builders, the pinning that writes the lock, the verifier, extraction, git apply, the donor."""
