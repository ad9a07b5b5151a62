"""Train a model: ``python scripts/train.py fit --config configs/multi30k_de_en_tiny.yaml``."""

from seq2seq.cli.train import main

if __name__ == "__main__":
    main()
