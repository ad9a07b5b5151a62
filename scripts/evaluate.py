"""Score checkpoints on a test set: ``python scripts/evaluate.py -m run.ckpt --split val``."""

from seq2seq.cli.evaluate import main

if __name__ == "__main__":
    main()
