"""The guard's pure core: the module and the .pth line the thin layer carries, written from the chain's file list."""
