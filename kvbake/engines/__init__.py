"""Engine profiles behind one small interface: the detection, one module per image store, and the one engine client."""
