"""Speed benchmarks of ``seq2seq`` against peer implementations, using only the package's
public API (``scripts/benchmark.py`` and ``scripts/benchmark_data.py`` are the CLIs).

timing     measure (median after a warm-up), peak RSS, threads, load-average guard
decode     decoding inputs, engines (ours, HF generate, CTranslate2), rows, the decode section
train      one optimizer step, ours vs MarianMTModel: the train section
attention  SDPA vs reference attention: the attention section
profile    torch.profiler over our beam search with ``seq2seq.profiling`` phase labels
report     targets (ratio >= need) and the printed tables
run        ``run()``: the chosen sections in order, JSON-ready results
data       the data-pipeline benchmark (cold and warm cache)
"""
