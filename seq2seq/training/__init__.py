"""Training: the LightningModule (loss, optimizer + schedule, validation BLEU) and our
Lightning callbacks / checkpoint I/O."""
