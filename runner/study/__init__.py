"""Studies: one file, many experiments (cells); their loading (load.py) and their sections of
summary.md."""
