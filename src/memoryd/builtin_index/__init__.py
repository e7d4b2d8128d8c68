"""builtin_index."""
