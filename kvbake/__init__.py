"""kvbake: bake a pinned patch chain into a verified, reproducible derived container image."""

__version__ = "0.1.0"
FORMAT_VERSION = 1
