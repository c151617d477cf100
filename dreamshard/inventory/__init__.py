"""Embedding-table inventories: synthetic (DLRM-like), from open DLRM traces, and synthetic lookups."""
