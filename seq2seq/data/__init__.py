"""Data: sources -> tokenizer -> cached tokenized splits -> token-budget batches.

    sources.pair_batches        cleaned pairs streamed from multi30k / text / tsv / jsonl / hub
    prepare.load_split          Dataset{src, tgt}, stored once as memory-mapped Arrow
    prepare.load_or_train_tokenizers, prepare.tokenized_split   (cached, see ``cache``)
    sampler.TokenBudgetSampler + batch.collate -> batch.Batch
    stream.StreamingBatches     the same batches from a streamed hub corpus
    datamodule.Seq2SeqDataModule   the Lightning face of all of it

Kept import-light: inference imports ``batch`` and ``tokenizer`` without ``datasets``.
"""
