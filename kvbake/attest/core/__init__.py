"""The pure side of signing: the SLSA provenance predicate a lock gives, and whether what cosign verified admits a release."""
