"""The pure side of engines: profile detection, the image store interface and its profiles, the identity model, save streams."""
