"""The one LLM layer: `anthropic:<model>`, `replay[:DIR]`, `host` and `hand:<FILE>`, chosen in select.py."""
