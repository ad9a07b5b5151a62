"""Data: sources -> tokenizer -> cached tokenized splits -> token-budget batches.

    sources.load_split         Dataset{src, tgt} from multi30k / text / tsv / jsonl / hub
    prepare.load_or_train_tokenizers, prepare.tokenized_split   (cached, see ``cache``)
    sampler.TokenBudgetSampler + batch.collate -> batch.Batch
    datamodule.Seq2SeqDataModule   the Lightning face of all of it

Kept import-light: inference imports ``batch`` and ``tokenizer`` without ``datasets``.
"""
