"""Rebase: move the patch chain to a new base image, hunk by hunk, and write a refreshed candidate chain."""
