"""The Kubernetes export's one adapter: the folder the documents are written to."""
