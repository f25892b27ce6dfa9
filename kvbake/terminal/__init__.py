"""The terminal: what a long step shows while it runs, when a person is watching."""
