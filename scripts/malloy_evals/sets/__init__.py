"""Eval sets: set.json, cases and goldens as people author them, and the check that goldens still
follow from the truth package."""
