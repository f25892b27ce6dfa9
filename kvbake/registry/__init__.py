"""The private registry: its distribution API client, its replies, credentials and the manifests it holds."""
