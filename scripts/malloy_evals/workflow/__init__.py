"""Whole-run workflows that chain the layers: scoring every attempt of a run, then retrieval, then the
summary."""
