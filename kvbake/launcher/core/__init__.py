"""The reference launcher's pure core: its variables and a node's settings in, a checked docker plan out."""
