"""Serving runs (recipes with `load:`): the recipe against its engine's OpenAI-compatible server,
rate by rate, under vLLM's own benchmark client (run.py), reached from the CLI; report.md's and
summary.md's sections (report.py)."""
