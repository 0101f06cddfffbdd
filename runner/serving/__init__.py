"""Serving-mode measurement: a recipe run against vLLM's OpenAI-compatible server at given request rates.

- spec.LoadSpec: the recipe's `load:` section (rates, arrival process, concurrency cap, SLOs);
- arrivals: seeded arrival schedules, as `vllm bench serve` makes them;
- client.run_rate: a streaming client that runs one rate and records every request (needs aiohttp);
- latency: TTFT/TPOT/ITL/E2E statistics, throughput, goodput, peak concurrency, saturation;
- server.Server: the server process (start, health, prefix-cache reset, metrics, group stop).

Nothing here imports vLLM. Import the submodules directly; this package imports none of them, so the
recipe can use LoadSpec without aiohttp installed.
"""
