"""Shipping's I/O: the push, the nodes' engines and records, the rollout and its transitions."""
