"""Provenance's adapters: the cosign program, keys and passwords."""
