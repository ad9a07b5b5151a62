"""Translate with a checkpoint: ``python scripts/translate.py -m run.ckpt < src > hyp``."""

from seq2seq.cli.translate import main

if __name__ == "__main__":
    main()
