"""The bottom of the runner: leaves (errors, files, stats, NVML, the bounded Jinja sandbox, dotted
keys) and the engine seam's types. Nothing here imports anything of the runner above it."""

__version__ = "0.1.0"
