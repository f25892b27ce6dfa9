"""kvbake: bake a pinned patch chain into a verified, reproducible derived container image."""

__version__ = "0.1.0"
FORMAT_VERSION = 3
# Lock formats this kvbake reads. Format 1 pins the manifest file's bytes; format 2 pins only its image sections, so a
# runtime edit (a preset, the drafter limit, a comment) needs no re-lock and no rebuild; format 3 drops the base's
# layer sizes, which only a `docker save` of the whole base could give, so lock reads the base in O(touched files).
READABLE_FORMATS = (1, 2, 3)
