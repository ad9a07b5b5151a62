"""Speed benchmarks of ``seq2seq`` against peer implementations, and the server's load test,
using only the package's public API (``scripts/benchmark.py``, ``scripts/benchmark_data.py``
and ``scripts/loadtest.py`` are the CLIs). Layers, each importing only from those before it:

engines    what is timed, on what: decode batches, our search, HF generate, training steps
timing     measure (median after a warm-up), peak RSS, threads, load guard, rows, targets
isolate    one engine per process: a row timed in a fresh child (CTranslate2's engine here)
opus       the OPUS-MT-size random model of ``benchmark.py --opus-size``, built once, cached
decode, train, attention, profile, vocab, split, shared, data, load
           the sections: their rows, ratios and targets (data: the data pipeline; load:
           the load test of ``seq2seq-serve``)
report     the printed tables and the targets report
run        ``run()``: the chosen sections in order, JSON-ready results
"""
