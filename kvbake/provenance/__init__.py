"""Provenance: signed releases and their in-toto SLSA provenance, made and checked with cosign."""
