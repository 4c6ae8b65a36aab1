"""Model clients behind one protocol (`base.ModelClient`), built by kind through one factory (`registry.py`)."""
