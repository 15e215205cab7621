"""Model coverage: the compiled surface of a model, and the reader that decides each case from it."""
