"""The registry's pure core: manifests and indexes as the registry holds them."""
