"""The answer judge: doctrine, packet, reply parsing and post-processing, the one decision path,
calibration, and the LLM providers every model-calling role shares."""
