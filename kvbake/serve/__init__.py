"""What a vLLM serve is: presets, runtime configuration, vLLM's argv and options, the serve read and described."""
