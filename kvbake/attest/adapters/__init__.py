"""Signing's adapters: the cosign program, the signature tags in the registry, the signing push --sign and sign share, the gate."""
