"""Shipping's I/O: the push and the registry client, the nodes' engines and records, the rollout and its transitions."""
