"""The printed tables of every section and the report of the speed targets."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from scripts.bench.timing import rss_label, rss_value


def fmt(value: Any, spec: str = "") -> str:
    """A table cell: "-" for None, PASS/FAIL for a bool, else ``format(value, spec)``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "PASS" if value else "FAIL"
    text = format(value, spec)
    return text[1:] if re.fullmatch(r"-0\.?0*", text) else text  # no "-0"


def format_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]],
                 notes: Sequence[str] = ()) -> str:
    """Fixed-width columns: the first two left-aligned (names), the rest right (numbers)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    rule = "-" * len(line(header))
    out = [title, rule, line(header), rule, *(line(r) for r in rows), rule]
    out += [f"  * {n}" for n in notes]
    return "\n".join(out)


def _target_cells(row: dict) -> list[str]:
    return ["-" if "target" not in row else f">= {row['target']:g}", fmt(row.get("pass"))]


DECODE_HEADER = ["engine", "search", "set", "sent.", "N", "median s", "sent/s", "tok/s",
                 "ours ÷ this", "target", "result", "agree %"]


def decode_table(result: dict, title: str) -> str:
    rows = [[r["engine"], r["search"], r["set"], str(r["sentences"]), fmt(r.get("max_tokens")),
             fmt(r["seconds"], ".3f"),
             fmt(r["sent_per_s"], ".1f"), fmt(r["tok_per_s"], ".0f"), fmt(r["ours_over_this"], ".2f"),
             *_target_cells(r), fmt(r["agree_pct"], ".1f"), fmt(rss_value(r), ".0f")]
            for r in result["rows"]]
    return format_table(title, [*DECODE_HEADER, rss_label()], rows,
                        result["notes"] + result["skipped"])


def tokens_table(result: dict, title: str) -> str:
    """The decode section's output tokens/s as docs/speed.md tables them across engines and
    compute types: a row per search (greedy, patience-1 beam), a column per engine."""
    rows = [r for r in result["rows"] if r["set"] == "all"]
    searches = [s for s in dict.fromkeys(r["search"] for r in rows)
                if s == "greedy" or s.endswith("patience 1")]
    engines = list(dict.fromkeys(r["engine"] for r in rows if r["search"] in searches))
    tok_s = {(r["search"], r["engine"]): r["tok_per_s"] for r in rows}
    return format_table(title, ["search, tokens/s", *engines],
                        [[s, *(fmt(tok_s.get((s, e)), ".0f") for e in engines)] for s in searches])


def train_table(result: dict, title: str) -> str:
    header = ["engine", "precision", "tok/s", "ms/step", "ours ÷ this", "target", "result", rss_label()]
    rows = [[r["engine"], r["precision"], fmt(r["tok_per_s"], ".0f"), fmt(r["ms_per_step"], ".1f"),
             fmt(r["ours_over_this"], ".2f"), *_target_cells(r), fmt(rss_value(r), ".0f")]
            for r in result["rows"]]
    return format_table(title, header, rows, result["notes"] + result["skipped"])


def gemm_table(result: dict, title: str) -> str:
    header = ["precision", "ms/step", "GEMM-only ms/step", "achieved GFLOP/s", "GEMM-only GFLOP/s",
              "fraction"]
    rows = [[r["precision"], fmt(1000 * r["step_s"] / r["steps"], ".1f"),
             fmt(1000 * r["gemm_s"] / r["steps"], ".1f"),
             fmt(r["achieved_flops_per_s"] / 1e9, ".2f"), fmt(r["gemm_flops_per_s"] / 1e9, ".2f"),
             fmt(r["fraction"], ".2f")] for r in result["rows"]]
    return format_table(title, header, rows, result["notes"] + result["skipped"])


def levers_table(result: dict, title: str) -> str:
    header = ["lever", "tok/s", "ms/step", "gain", "warm-up s"]
    rows = [[r["engine"], fmt(r["tok_per_s"], ".0f"), fmt(r["ms_per_step"], ".1f"),
             fmt(r["gain"], ".2f"), fmt(r["warmup_s"], ".1f")] for r in result["rows"]]
    return format_table(title, header, rows, result["notes"])


def vocab_table(result: dict, title: str) -> str:
    header = ["vocabulary", "tok/s", "ms/step", "tgt pieces/sent", "pairs/s", "epoch s", "pairs/s gain"]
    rows = [[r["engine"], fmt(r["tok_per_s"], ".0f"), fmt(r["ms_per_step"], ".1f"),
             fmt(r["tgt_pieces_per_sentence"], ".2f"), fmt(r["pairs_per_s"], ".0f"),
             fmt(r["epoch_s"], ".1f"), fmt(r["pairs_gain"], ".2f")] for r in result["rows"]]
    return format_table(title, header, rows, result["notes"])


def attention_table(result: dict, title: str) -> str:
    header = ["shape", "dims", "sdpa fwd µs", "matmul fwd µs", "matmul ÷ sdpa", "sdpa f+b µs",
              "matmul f+b µs", "matmul ÷ sdpa"]
    rows = [[r["shape"], r["dims"], fmt(r["sdpa_fwd_us"], ".1f"), fmt(r["matmul_fwd_us"], ".1f"),
             fmt(r["matmul_over_sdpa_fwd"], ".2f"), fmt(r["sdpa_fwdbwd_us"], ".1f"),
             fmt(r["matmul_fwdbwd_us"], ".1f"), fmt(r["matmul_over_sdpa_fwdbwd"], ".2f")]
            for r in result["rows"]]
    return format_table(title, header, rows, result["notes"])


def profile_report(res: dict, title: str) -> str:
    """Summary lines, then time per phase (``profiling.PHASES`` order), then top operators."""
    waste = res["decoder_rows"] / max(res["decoder_rows_if_stopped_at_best"], 1)
    total = res["wall_s"]
    lines = [
        title,
        f"  {res['sentences']} sentences in {res['batches']} batches (the longest), "
        f"{total:.2f} s under the profiler; {res['steps']} decoder steps "
        f"(length limits {res['max_len']}), mean 1-best length {res['mean_best_len']:.1f}",
        f"  decoder rows computed {res['decoder_rows']:,}; if each sentence stopped right after "
        f"its 1-best's EOS: {res['decoder_rows_if_stopped_at_best']:,} ({waste:.1f}x fewer)",
    ]
    if "kernel_s" in res:
        lines.append(f"  inside matmul / attention kernels (mm, addmm, bmm, baddbmm, SDPA, oneDNN "
                     f"linear; self time): {res['kernel_s']:.2f} s, "
                     f"{100 * res['kernel_s'] / total:.1f}% of wall")
    return "\n".join(lines + _phases_and_ops(res, total))


def _phases_and_ops(res: dict, total: float) -> list[str]:
    """Time per phase, then the top operators, each with its share of ``total`` wall time."""
    lines = ["", f"  {'phase (CPU time incl. what runs inside it)':<60s} {'s':>7s} {'% wall':>7s}"]
    lines += [f"  {p['phase']:<60s} {p['seconds']:7.3f} {100 * p['seconds'] / total:6.1f}%"
              for p in res["phases"]]
    lines += ["", f"  {'operator (self CPU time)':<60s} {'s':>7s} {'% wall':>7s} {'calls':>8s}"]
    lines += [f"  {o['op'][:60]:<60s} {o['seconds']:7.3f} {100 * o['seconds'] / total:6.1f}% "
              f"{o['calls']:8d}" for o in res["ops"]]
    return lines


def train_profile_report(res: dict, title: str) -> str:
    """A training step's time per phase, then its top operators."""
    total = res["wall_s"]
    lines = [title, f"  {res['batches']} steps, {res['target_tokens']:,} target tokens, "
             f"{total:.2f} s under the profiler"]
    return "\n".join(lines + _phases_and_ops(res, total))


def targets_report(targets: Sequence[dict]) -> str:
    lines = ["Targets:"]
    lines += [f"  {fmt(t['pass'])}  {t['target']}: {t['ratio']:.2f} (need >= {t['need']:g})"
              for t in targets]
    return "\n".join(lines)


def split_table(result: dict, title: str) -> str:
    header = ["split", "tok/s (all ranks)", "updates/s", "tokens/update", "gain", "runs tok/s"]
    rows = [[r["split"], fmt(r["tok_per_s"], ".0f"), fmt(r["updates_per_s"], ".3f"),
             fmt(r["tokens_per_update"], ".0f"), fmt(r["gain"], ".2f"),
             " / ".join(f"{x:.0f}" for x in r["all_tok_per_s"])] for r in result["rows"]]
    notes = [f"updates {result['skip']} to {result['steps']} of a fresh run each (start-up, "
             "data loading and the first updates excluded); median run of each split",
             "DDP's second rank is started by the first (a grandchild of the benchmark, never "
             "waited for by it), so the 'other processes' CPU below counts it: about half a "
             "core over the section is that rank, not other work"]
    return format_table(title, header, rows, notes)


def shared_table(result: dict, title: str) -> str:
    header = ["task", "policy", "busy cores", "rate /s", "threads start/end", "vs alone",
              "fair share"]
    rows = [[r["task"], r["policy"], str(r["busy"]), fmt(r["rate"], ".2f"),
             f"{r['threads_start']}/{r['threads_end']}", fmt(r["vs_alone"], ".2f"),
             fmt(r["fair_share"], ".2f")] for r in result["rows"]]
    return format_table(title, header, rows, result["notes"])


def students_table(result: dict, title: str) -> str:
    header = ["model", "search", "layers", "params", "N", "median s", "sent/s", "× teacher",
              "BLEU", "lc-tok", "chrF"]
    rows = [[f"{r['role']} {r['model']}", r["search"], r["layers"], f"{r['params'] / 1e6:.2f}M",
             fmt(r["max_tokens"]), fmt(r["seconds"], ".3f"), fmt(r["sent_per_s"], ".1f"),
             fmt(r["teacher_beam_over_this"], ".2f"), fmt(r["BLEU"], ".2f"),
             fmt(r["BLEU-lc-tok"], ".2f"), fmt(r["chrF"], ".2f")] for r in result["rows"]]
    return format_table(title, header, rows, result["notes"])


def latency_table(result: dict, title: str) -> str:
    header = ["engine", "search", "p50 ms", "p95 ms", "mean ms", "% same as ours"]
    rows = [[r["engine"], r["search"], fmt(r["p50_ms"], ".2f"), fmt(r["p95_ms"], ".2f"),
             fmt(r["mean_ms"], ".2f"), fmt(r.get("same_as_ours_pct"), ".1f")]
            for r in result["rows"]]
    return format_table(title, header, rows, result["notes"] + result["skipped"])
