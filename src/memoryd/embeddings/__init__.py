"""Embedding providers, each in its own module imported when selected (a keyword-only search
never loads httpx or numpy)."""
