"""scope_rules."""
