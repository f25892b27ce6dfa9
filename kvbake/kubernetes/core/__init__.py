"""The pure core of the Kubernetes export: documents as data, their schema and own checks, their YAML text."""
