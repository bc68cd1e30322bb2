"""Capture formats: one module per format, found by file suffix."""
