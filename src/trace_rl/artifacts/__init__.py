"""The run directory: every path of it, and typed read/write functions for every file one stage writes and another
reads. No other module spells a run-directory path or parses those files."""
