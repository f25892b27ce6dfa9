"""The engine side that does I/O: the python-on-whales client (the only code talking to an engine) and the manifest cache."""
