"""A release handed to Kubernetes: a LeaderWorkerSet and sigstore admission policies, written and checked offline."""
