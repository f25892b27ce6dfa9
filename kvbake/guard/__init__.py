"""The image's own start-up check: a module and a .pth hook baked into the thin layer with the chain's file list."""
