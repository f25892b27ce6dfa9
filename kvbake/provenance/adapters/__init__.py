"""Provenance's adapters: what trace finds again (files, the registry, cosign's checks, the fleet)."""
