"""The registry's adapters: the HTTP client, its replies and the engine client's credentials."""
