"""The network: attention + masks, layers, the decoder cache, and ``Seq2Seq`` itself.

A plain ``nn.Module`` world: nothing here imports Lightning, data or decoding.
"""

from seq2seq.model import compute
from seq2seq.model.cache import DecoderCache
from seq2seq.model.transformer import Attentions, Seq2Seq

__all__ = ["Attentions", "DecoderCache", "Seq2Seq", "compute"]
