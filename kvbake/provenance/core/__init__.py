"""The pure core of provenance: the SLSA provenance predicate a release's lock gives."""
