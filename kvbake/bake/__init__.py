"""The bake stage: lock, build, verify; a verified derived image from the manifest, the lock and the chain."""
