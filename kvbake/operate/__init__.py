"""The operate stage: presets, runtime configs, the KV capacity check, the supervised validation plan, doctor."""
