"""The network: attention + masks, layers, the decoder cache, and ``Seq2Seq`` itself; its
accelerators at inference are in ``seq2seq.model.inference``.

A plain ``nn.Module`` world: nothing here imports Lightning, data or decoding.
"""

from seq2seq.model.cache import DecoderCache
from seq2seq.model.transformer import Attentions, Seq2Seq

__all__ = ["Attentions", "DecoderCache", "Seq2Seq"]
