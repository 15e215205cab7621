"""One answer scored end to end: transcripts into attempts, re-execution, scoring, retrieval recall
and model coverage."""
