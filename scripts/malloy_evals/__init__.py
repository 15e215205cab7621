"""malloy-evals: decide whether an agent's answer over a Malloy model was right, why, and who owns a failure."""

__version__ = "0.1.0"
