"""qmd_adapter."""
