"""Rebase's adapters: the scratch git tree, the two chains' file states, the candidate folder."""
