"""The pure side of shipping: the release record, the node records, the journal, the rank checks."""
