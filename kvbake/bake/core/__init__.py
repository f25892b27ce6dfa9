"""The pure side of the bake: the plan, the thin layer, the derived image, the chain, the labels and the image checks."""
