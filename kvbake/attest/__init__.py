"""Signatures and attestations: the SLSA provenance of a release, cosign, the signature gate deploy and rollback pass."""
