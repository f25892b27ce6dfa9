"""The pure side of a serve: preset rules, per-rank runtime settings, vLLM's command line and options, the serve read from processes."""
