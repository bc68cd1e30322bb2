"""Ingest: capture files -> verified records -> the evidence store (``store``)."""
