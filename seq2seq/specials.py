"""Special token ids: the one source.

Every SentencePiece model we train reserves these ids (``seq2seq.data.tokenizer``), every
``ModelConfig`` defaults to them, ``seq2seq.data.batch`` adds BOS/EOS with them and the
exporters name them. A checkpoint stores the ids its model was trained with.
"""

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
