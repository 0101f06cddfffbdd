"""The offline run: a job in its own process group, one engine per job, resume, the one RunResult
constructor."""
