"""The pure core of provenance: the chain of evidence, each link holding only when what is found equals what was recorded."""
