"""The pure core of rebase: what git apply said per hunk, the upstream change a hunk meets, the report."""
