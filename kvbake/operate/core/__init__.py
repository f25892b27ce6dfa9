"""The pure side of operating: the validation plan, its scorers and helpers, which preset a serve equals, capacity lines."""
