"""Model clients behind one protocol; see `base.ModelClient` and `resolve.build_client`."""
