"""What a run amounts to: the summary figures and their renderings. Reads everything below it; nothing
below reads it."""
