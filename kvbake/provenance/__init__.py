"""Provenance: the keys, sign and trace commands, and the chain of evidence trace finds again, from the lock to every rank."""
