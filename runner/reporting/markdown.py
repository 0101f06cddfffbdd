"""All Markdown the runner writes: per-recipe report.md and the call's summary.md."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import yaml
from tabulate import tabulate

from runner.files import write_text_atomic
from runner.errors import RunnerError
from runner.execution.layout import RunFolder, check_name, stored_results, summary_path
from runner.reporting.results import RunResult

N_EXAMPLES_SHOWN = 3


def cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    s = str(v)
    return s.replace("|", "\\|").replace("\n", " ")


def secs(v: float | None) -> str:
    if v is None:
        return "–"
    if v >= 3600:
        return f"{v / 3600:.1f} h"
    return f"{v:,.1f} s" if v >= 10 else f"{v:.2f} s"


def table(rows: list[list[Any]], headers: list[str]) -> str:
    return tabulate([[cell(c) for c in r] for r in rows], headers=headers, tablefmt="github",
                    disable_numparse=True)


def _interval(e: Any) -> str:
    if e.low_s is None or e.high_s is None:
        return "no interval"
    return f"95% interval {secs(e.low_s)} – {secs(e.high_s)}"


def engine_label(r: RunResult) -> str:
    from runner.engines import spec_class
    cls = spec_class(r.recipe.get("engine", {}).get("kind"))
    return (cls.label if cls else "") or r.engine.name or str(r.recipe.get("engine", {}).get("kind"))


def _banners(r: RunResult) -> list[str]:
    out = []
    from runner.engines import spec_class
    cls = spec_class(r.recipe.get("engine", {}).get("kind"))
    if cls is not None and cls.fake:
        out.append(f"> **FAKE ENGINE**: `{cls.kind_name()}` made these outputs up from a template; no model ran. "
                   "Times, tokens and scores test the pipeline only.")
    if r.status != "ok":
        out.append(f"> **FAILED**: {r.error}" + (f"\n>\n> Hint: {r.hint}" if r.hint else ""))
    if not r.scores_meaningful:
        out.append("> **Scores are not meaningful**: this run used random weights "
                   "(`load_format: dummy` or the builtin smoke-test model); read it for speed only.")
    for n in r.notes:
        out.append(f"> Note: {n}")
    if r.estimate:
        e = r.estimate
        out.append(f"> **Estimate**: {e.n_measured} of {e.n_total} examples were run; the full time is "
                   f"projected at {secs(e.projected_s)} ({_interval(e)}; {e.method}).")
    return out


def report_markdown(r: RunResult, samples: list[dict]) -> str:
    rec = r.recipe
    parts = [f"# {r.name}", ""]
    if rec.get("description"):
        parts += [rec["description"], ""]
    parts += [f"Status: **{r.status}** · engine: {engine_label(r)} {r.engine.version} · "
              f"model: `{rec['model']['id']}` · device: {r.engine.device or '–'} · "
              f"samples: {r.n_samples} of {r.n_dataset} · finished {r.finished_at}", ""]
    for b in _banners(r):                    # each its own block quote (adjacent ones would merge)
        parts += [b, ""]
    parts += ["", "## Time and throughput", ""]
    t, th = r.timings, r.throughput
    gen = secs(t.generate_s)
    parts.append(table([[secs(t.load_s), gen, secs(t.total_s), cell(th.requests_per_s),
                         cell(th.output_tokens_per_s), cell(th.total_tokens_per_s)]],
                       ["engine start", "generation", "total", "requests/s", "output tok/s", "total tok/s"]))
    if r.estimate:
        e = r.estimate
        parts += ["", f"Projected full-dataset generation (**estimate**): ~{secs(e.projected_s)} "
                      f"({_interval(e)}) from {e.n_measured} examples."]
    parts += ["", "## Tokens", ""]
    parts.append(table([[r.tokens.prompt, r.tokens.output, r.tokens.cached,
                         f"{r.tokens.prompt / r.n_samples:.1f}" if r.n_samples else None,
                         f"{r.tokens.output / r.n_samples:.1f}" if r.n_samples else None]],
                       ["prompt", "output", "prompt from cache", "prompt / example", "output / example"]))
    lat = [(n, p) for n, p in (("time to first token", r.latency.ttft_s), ("end-to-end", r.latency.e2e_s)) if p]
    if lat:
        parts += ["", "## Latency per request", ""]
        parts.append(table([[n, secs(p.p50), secs(p.p90), secs(p.p99), secs(p.mean)] for n, p in lat],
                           ["", "p50", "p90", "p99", "mean"]))
    m = r.memory
    parts += ["", "## Memory", ""]
    parts.append(table([[_gib(m.peak_gpu_gib), _gib(m.baseline_gpu_gib), _gib(m.weights_gib),
                         f"{m.kv_cache_tokens:,}" if m.kv_cache_tokens else None, _gib(m.kv_cache_gib)]],
                       ["peak GPU (whole device)", "GPU before start", "weights", "KV cache (tokens)",
                        "KV cache"]))
    parts += ["", "## Scores", ""]
    if r.scores:
        parts += score_table(r)
    else:
        parts.append("No scores (no gold answers, or the run failed).")
    p = r.prefix
    parts += [] if r.status != "ok" else ["", "## Prompt prefix", "",
              f"Every prompt starts with the same {p.shared_prefix_tokens} tokens: "
              f"{p.shared_prefix_share:.1%} of all prompt tokens, the most prefix caching can skip."
              + (f" Measured hit rate: {p.hit_rate:.1%}." if p.hit_rate is not None else "")]
    if r.knobs:
        parts += ["", "## Knobs: requested and effective", ""]
        parts.append(table([[k.name, _v(k.requested), _v(k.effective),
                             ("**IGNORED**" if k.status == "ignored" else k.status), k.evidence]
                            for k in r.knobs], ["knob", "requested", "effective", "status", "evidence"]))
    if samples:
        parts += ["", "## Sample prompts and outputs", ""]
        for s in samples[:N_EXAMPLES_SHOWN]:
            parts += [f"### {s['id']}", "", "Prompt:", "", "```text", s["prompt"].replace("```", "ˋˋˋ"), "```", "",
                      f"Output: `{_inline(s['output'])}` · gold: "
                      + ", ".join(f"`{_inline(a)}`" for a in s.get("answers", [])), ""]
    parts += reproducibility(r)
    return "\n".join(parts)


def score_table(r: RunResult) -> list[str]:
    """Each score with the convention it follows, and the recipe's gold policy and clean-up."""
    from runner.scoring import conventions
    note = " (not meaningful: random weights or a fake engine)" if not r.scores_meaningful else ""
    scoring = r.recipe.get("scoring") or {}
    gold = scoring.get("gold")
    conv = conventions([k for k in r.scores])
    rows = [[k, f"{v:.4f}", conv[k].name, gold or conv[k].gold, conv[k].formula] for k, v in r.scores.items()]
    out = [table(rows, ["metric", "score" + note, "convention", "gold answers", "formula"])]
    post = {k: v for k, v in (scoring.get("postprocess") or {}).items() if v}
    out += ["", "Output clean-up before scoring: " + (", ".join(f"{k}={v!r}" for k, v in post.items()) or "none")
            + (f"; gold policy set by the recipe: {gold}" if gold else "; gold policy: each metric's own") + "."]
    return out


REPRO_KEYS = ("runner", "git_commit", "python", "platform", "gpu", "driver", "cuda_driver", "gpu_memory_gib")


def reproducibility(r: RunResult) -> list[str]:
    """Everything needed to run this again and get comparable numbers."""
    env = r.environment
    rows = [["recipe hash", f"`{r.recipe_hash}`"], ["run key", f"`{r.run_key}`" if r.run_key else None]]
    rows += [[k, f"`{v}`"] for k, v in env.get("inputs", {}).items()]
    rows += [[k.replace("_", " "), env.get(k)] for k in REPRO_KEYS]
    rows += [[k, v] for k, v in env.get("packages", {}).items()]
    extra = env.get("engine_extra", {})
    if extra.get("model_runner"):
        rows.append(["vLLM model runner", extra["model_runner"]])
    if extra.get("env"):
        rows.append(["engine environment", ", ".join(f"{k}={v}" for k, v in extra["env"].items())])
    rows.append(["started / finished", f"{r.started_at} / {r.finished_at}"])
    out = ["", "## Reproduce", "", table(rows, ["", "value"]), ""]
    if r.command:
        out += ["Command (from the directory it was run in):", "", "```bash", r.command, "```"]
    out += ["", "## Resolved recipe", "", "```yaml",
            yaml.safe_dump(r.recipe, sort_keys=False, allow_unicode=True).rstrip(), "```", ""]
    return out


def _gib(v: float | None) -> str | None:
    return None if v is None else f"{v:.1f} GiB"


def _diff_cell(diff: dict[str, Any], limit: int = 300) -> str:
    """The settings that differ, as many as fit in `limit` characters, then a count of the rest."""
    parts: list[str] = []
    used = 0
    for i, (k, v) in enumerate(diff.items()):
        item = f"{k}={_short(v)}"
        if parts and used + len(item) + 2 > limit:
            return ", ".join(parts) + f", … +{len(diff) - i} more (see its report.md)"
        parts.append(item)
        used += len(item) + 2
    return ", ".join(parts)


def _short(v: Any, width: int = 36) -> str:
    """A setting's value for a table cell: lists and mappings summarized, long text cut."""
    if v is None:
        return "(unset)"
    if isinstance(v, list):
        return f"[{len(v)} item{'s' if len(v) != 1 else ''}]" if any(isinstance(x, (dict, list)) for x in v) \
            else _short(",".join(map(str, v)), width)
    s = str(v)
    return s if len(s) <= width else "…" + s[-(width - 1):]


def _v(v: Any) -> str:
    return "(default)" if v is None else str(v)


def _inline(s: str) -> str:
    return s.replace("`", "ˋ").replace("\n", "⏎")


def load_samples(folder: RunFolder) -> list[dict]:
    """samples.jsonl, or samples.jsonl.gz where an archive was compressed to keep it small."""
    import gzip
    path = folder.samples if folder.samples.is_file() else folder.samples_gz
    if not path.is_file():
        return []
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise RunnerError(f"cannot read the samples ({type(e).__name__}: {e})", file=str(path),
                          hint="delete the file and rerun the recipe (runner go ... --force)") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            d = None
        if not isinstance(d, dict) or not isinstance(d.get("id"), (str, int)):
            raise RunnerError(f"line {n} is not a sample", file=str(path),
                              hint="delete the file and rerun the recipe (runner go ... --force)")
        out.append(d)
    return out


def write_report(r: RunResult, out: Path) -> Path:
    folder = RunFolder.of(out, r.name)
    write_text_atomic(folder.report, report_markdown(r, load_samples(folder)))
    return folder.report


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = d
    return out


SKIP_DIFF = {"name", "description", "baseline", "timeout_s", "estimate"}


def _engine_view(engine: dict) -> dict:
    """An engine's kind plus only the fields set away from that kind's defaults, so engines of
    different kinds compare by what was chosen, not by every field either kind has."""
    from runner.engines import spec_class
    cls = spec_class(engine.get("kind"))
    if cls is None:
        return engine
    defaults = cls.model_validate({"kind": engine["kind"]}).model_dump(mode="json")
    return {k: v for k, v in engine.items() if k == "kind" or defaults.get(k) != v}


def recipe_diff(rec: dict, base: dict) -> dict[str, Any]:
    """Settings of `rec` that differ from `base` (dotted keys)."""
    full = _flat(rec)
    rec = {**rec, "engine": _engine_view(rec.get("engine", {}))}
    base = {**base, "engine": _engine_view(base.get("engine", {}))}
    a, b = _flat(rec), _flat(base)
    other_kind = rec["engine"].get("kind") != base["engine"].get("kind")
    out = {}
    for k in sorted(set(a) | set(b)):
        if k.split(".")[0] in SKIP_DIFF or k == "engine.kind":     # the kind has its own column
            continue
        if other_kind and k.startswith("engine.") and k not in a:  # a field the other engine does not have
            continue
        if a.get(k) != b.get(k):
            out[k] = a.get(k, full.get(k))
    return out


def pick_baseline(results: list[RunResult], name: str | None = None) -> RunResult | None:
    if name:
        return next((r for r in results if r.name == name), None)
    return next((r for r in results if r.recipe.get("baseline")), None)


def _prefix_on(r: RunResult) -> bool:
    """The engine has a prefix cache and it was on (as measured where the engine said so)."""
    from runner.engines import spec_class
    eng = r.recipe.get("engine", {})
    cls = spec_class(eng.get("kind"))
    if cls is None or cls.prefix_cache_field is None:
        return False
    eff = next((k.effective for k in r.knobs if k.name == cls.prefix_cache_field), None)
    if eff is not None:
        return bool(eff)
    want = eng.get(cls.prefix_cache_field)
    return cls.prefix_cache_default if want is None else bool(want)


def prefix_section(results: list[RunResult]) -> list[str]:
    """Shared prefix (from the prompts), measured hit rate, and time saved against the same recipe
    with caching off, for each recipe with prefix caching on."""
    rows = []
    for r in results:
        if r.status != "ok" or not _prefix_on(r):
            continue
        partner = None
        for o in results:
            if o is r or o.status != "ok":
                continue
            if set(recipe_diff(r.recipe, o.recipe)) == {"engine.enable_prefix_caching"}:
                partner = o
        saved = None
        if partner and partner.timings.generate_s and r.timings.generate_s:
            d = partner.timings.generate_s - r.timings.generate_s
            saved = f"{d:.1f} s ({d / partner.timings.generate_s:.0%}) vs {partner.name}"
        rows.append([r.name, r.prefix.shared_prefix_tokens, f"{r.prefix.shared_prefix_share:.1%}",
                     f"{r.prefix.hit_rate:.1%}" if r.prefix.hit_rate is not None else None, saved])
    if not rows:
        return []
    return ["", "## Prefix caching", "",
            "Shared prefix: tokens every prompt starts with, and their share of all prompt tokens (the most "
            "prefill work prefix caching can skip; block-granular caching can also reuse partial prefixes "
            "shared by some prompts).", "",
            table(rows, ["recipe", "shared prefix (tokens)", "max prefill saved", "measured hit rate",
                         "generation time saved"])]


def changed_answers_section(results: list[RunResult], base: RunResult | None, out: Path | None,
                            n_show: int = 3) -> list[str]:
    """Per recipe with real weights: examples whose exact match differs from the baseline's,
    with an exact McNemar test on the discordant pairs."""
    from runner.reporting.stats import mcnemar_exact
    if base is None or out is None or base.status != "ok" or not base.scores_meaningful \
            or "exact_match" not in base.scores:
        return []
    bs = {s["id"]: s for s in load_samples(RunFolder.of(out, base.name))}
    lines: list[str] = []
    rows = []
    for r in results:
        if r is base or r.status != "ok" or not r.scores_meaningful or "exact_match" not in r.scores:
            continue
        rs = {s["id"]: s for s in load_samples(RunFolder.of(out, r.name))}
        common = [i for i in rs if i in bs and "exact_match" in rs[i] and "exact_match" in bs[i]]
        if not common:
            continue
        gained = [i for i in common if rs[i]["exact_match"] > bs[i]["exact_match"]]
        lost = [i for i in common if rs[i]["exact_match"] < bs[i]["exact_match"]]
        p = mcnemar_exact(len(gained), len(lost))
        diff = (sum(rs[i]["exact_match"] for i in common) - sum(bs[i]["exact_match"] for i in common)) / len(common)
        rows.append([r.name, len(common), len(gained), len(lost), f"{diff:+.3f}", f"{p:.3g}",
                     "yes" if p < 0.05 else "no"])
        for i in (lost + gained)[:n_show]:
            lines.append(f"- {r.name} · `{i}`: baseline `{_inline(bs[i]['output'])}` → `{_inline(rs[i]['output'])}` "
                         f"(gold: {', '.join(_inline(a) for a in rs[i]['answers'])})")
    if not rows:
        return []
    return ["", f"## Answers that change against {base.name}", "",
            table(rows, ["recipe", "paired examples", "now right", "now wrong", "EM difference",
                         "McNemar p (exact)", "larger than chance (p<0.05)"]), "", *lines]


def summary_markdown(results: list[RunResult], baseline: str | None = None, out: Path | None = None) -> str:
    base = pick_baseline(results, baseline)
    parts = ["# Summary", "", f"{len(results)} recipes; "
             + (f"baseline: **{base.name}**." if base else "no baseline (mark one with `baseline: true` or "
                "`--baseline NAME`).")]
    metric_names: list[str] = []
    for r in results:
        for m in r.scores:
            if m not in metric_names:
                metric_names.append(m)
    if metric_names and not any(r.scores_meaningful and r.scores for r in results):
        parts.append("Scores are left out: every recipe here ran with random weights (speed and memory only).")
        metric_names = []
    rows = []
    for r in results:
        t = r.estimate.projected_s if r.estimate else r.timings.generate_s
        bt = None
        if base is not None and base.status == "ok":
            bt = base.estimate.projected_s if base.estimate else base.timings.generate_s
        approx = "~" if (r.estimate or (base is not None and base.estimate)) else ""
        speed = f"{approx}{bt / t:.1f}×" if (t and bt and r.status == "ok") else None
        tcell = secs(t) if t is not None else None
        if r.estimate and t is not None:
            tcell = f"~{secs(t)} (est. from {r.estimate.n_measured})"
        diff = recipe_diff(r.recipe, base.recipe) if base is not None and r is not base else {}
        diff_s = _diff_cell(diff) if diff else ("(baseline)" if r is base else "")
        knob_flags = [k.name for k in r.knobs if k.status == "ignored"]
        status = r.status if not knob_flags else f"{r.status}; ignored: {', '.join(knob_flags)}"
        scores = [(f"{r.scores[m]:.3f}" if m in r.scores and r.scores_meaningful else
                   ("n/a (random weights)" if m in r.scores else None)) for m in metric_names]
        rows.append([r.name, status, r.recipe.get("engine", {}).get("kind"), tcell, speed,
                     r.throughput.requests_per_s, r.throughput.output_tokens_per_s,
                     _gib(r.memory.peak_gpu_gib), *scores, diff_s])
    parts += ["", table(rows, ["recipe", "status", "engine", "generation time", "speed-up", "requests/s",
                               "output tok/s", "peak GPU", *metric_names, "differs from baseline"])]
    parts += prefix_section(results)
    parts += changed_answers_section(results, base, out)
    failed = [r for r in results if r.status != "ok"]
    if failed:
        parts += ["", "## Failures", ""]
        for r in failed:
            parts.append(f"- **{r.name}**: {r.error}" + (f" — hint: {r.hint}" if r.hint else ""))
    parts += ["", "Times marked `~` are projections from a partial run (see each report). "
              "Scores of runs with random weights are left out of comparisons.", ""]
    return "\n".join(parts)


def write_summary(results: Iterable[RunResult], out: Path, baseline: str | None = None) -> Path:
    from runner.reporting.plots import write_charts
    results = list(results)
    path = summary_path(out)
    charts = write_charts(results, pick_baseline(results, baseline), out)
    text = summary_markdown(results, baseline, out)
    if charts:
        text += "\n## Charts\n\n" + "\n\n".join(f"![{c.stem}]({c.name})" for c in charts) + "\n"
    write_text_atomic(path, text)
    return path


def load_results(out: Path) -> list[RunResult]:
    """Every stored results.json under `out`, each checked (schema, and a name that is its folder's)."""
    from pydantic import ValidationError
    res = []
    for p in stored_results(out):
        if not p.is_file():
            raise RunnerError("is not a file", file=str(p), hint="remove it, or rerun that recipe")
        try:
            r = RunResult.model_validate_json(p.read_bytes())
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
            raise RunnerError(f"not a valid results.json ({e.error_count()} problem(s); first: {loc}: "
                              f"{first['msg']})", file=str(p), hint="rerun that recipe, or remove its folder") from None
        except OSError as e:
            raise RunnerError(f"cannot read it: {e.strerror}", file=str(p)) from None
        check_name(r.name, str(p))
        if r.name != p.parent.name:
            raise RunnerError(f"names the run {r.name!r} but lies in the folder {p.parent.name!r}", file=str(p),
                              field="name", hint="move the folder back to its run's name, or remove it")
        res.append(r)
    return res
