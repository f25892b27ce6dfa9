"""kvbake: bake a pinned patch chain into a verified, reproducible derived container image."""

__version__ = "0.1.0"
FORMAT_VERSION = 2
# Lock formats this kvbake reads. Format 1 pins the manifest file's bytes; format 2 pins only its image sections, so a
# runtime edit (a preset, the drafter limit, a comment) needs no re-lock and no rebuild.
READABLE_FORMATS = (1, 2)
