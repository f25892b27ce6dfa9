"""The pure side of operating: presets, runtime configs, the validation plan, its scorers and helpers, capacity lines."""
