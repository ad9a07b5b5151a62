"""A locally built OPUS-MT-shaped MarianMT folder (no hub): ``MarianConfig`` with OPUS-MT's
settings (swish, scaled embeddings, shared vocabulary ending in ``<pad>``, the decoder
starting from pad, EOS id 0, a logits bias) at a small size, random weights, and a
``MarianTokenizer`` over two small SentencePiece models trained here."""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch
from helpers import multi30k_lines

from scripts.bench.opus import eos_margins


def train_spm(texts: list[str], size: int, model_type: str) -> bytes:
    """A SentencePiece model with OPUS-MT's special pieces (<unk> 0, <s> 1, </s> 2)."""
    import sentencepiece as spm

    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=writer,
                                   vocab_size=size, model_type=model_type, minloglevel=2,
                                   num_threads=1, character_coverage=1.0)
    return writer.getvalue()


def opus_vocab(src_spm: bytes, tgt_spm: bytes) -> list[str]:
    """OPUS-MT's joint vocabulary: </s> 0, <unk> 1, both sides' pieces, <pad> last."""
    import sentencepiece as spm

    pieces = ["</s>", "<unk>"]
    for proto in (src_spm, tgt_spm):
        sp = spm.SentencePieceProcessor(model_proto=proto)
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)) and sp.id_to_piece(i) not in pieces:
                pieces.append(sp.id_to_piece(i))
    return pieces + ["<pad>"]


def write_tokenizer_files(folder: Path, model_type: str = "unigram") -> list[str]:
    """What MarianTokenizer reads (two SentencePiece models trained here on Multi30k, the
    joint vocab.json, tokenizer_config.json); returns the vocabulary."""
    folder.mkdir(parents=True, exist_ok=True)
    src_spm = train_spm(multi30k_lines("de", 500), 150, model_type)
    tgt_spm = train_spm(multi30k_lines("en", 500), 120, model_type)
    vocab = opus_vocab(src_spm, tgt_spm)
    (folder / "source.spm").write_bytes(src_spm)
    (folder / "target.spm").write_bytes(tgt_spm)
    (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(vocab)}),
                                       encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "source_lang": "de", "target_lang": "en", "model_max_length": 512,
        "separate_vocabs": False, "tokenizer_class": "MarianTokenizer"}), encoding="utf-8")
    return vocab


def marian_config(vocab_size: int, **overrides):
    from transformers import MarianConfig

    pad = vocab_size - 1
    kw = dict(vocab_size=vocab_size, decoder_vocab_size=vocab_size, d_model=32,
              encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
              activation_function="swish", max_position_embeddings=512, scale_embedding=True,
              share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
              dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, init_std=0.02,
              pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
              forced_eos_token_id=0, bos_token_id=0)
    kw.update(overrides)
    return MarianConfig(**kw)


def build_opus_folder(folder: Path, model_type: str = "unigram", seed: int = 0,
                      **overrides) -> Path:
    """Write the folder; returns it."""
    from transformers import GenerationConfig, MarianMTModel

    vocab = write_tokenizer_files(folder, model_type)
    # large random weights (HF's init_std 0.02 gives one repeated token for every input)
    config = marian_config(len(vocab), **{"init_std": 0.6, **overrides})
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # a real logits bias, and norms off their init: nothing trivial
        model.final_logits_bias.normal_(0.0, 0.1)
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    model.generation_config = GenerationConfig(
        bad_words_ids=[[config.pad_token_id]], decoder_start_token_id=config.pad_token_id,
        eos_token_id=0, forced_eos_token_id=0, pad_token_id=config.pad_token_id,
        max_length=512, num_beams=4)
    _calibrate_eos(model)
    model.save_pretrained(folder)
    return folder


@torch.no_grad()
def _calibrate_eos(model, rate: float = 0.3) -> None:
    """Set EOS's logits bias so that EOS is the argmax at about ``rate`` of decoder steps:
    a random model otherwise never ends, and outputs should end at varied lengths."""
    config = model.config
    g = torch.Generator().manual_seed(1)
    src = torch.randint(1, config.vocab_size - 1, (64, 12), generator=g)
    tgt = torch.randint(1, config.vocab_size - 1, (64, 30), generator=g)
    tgt[:, 0] = config.decoder_start_token_id
    logits = model(input_ids=src, decoder_input_ids=tgt).logits  # (B, L, V)
    margin = eos_margins(logits, config.eos_token_id).flatten()  # EOS wins where bias > margin
    model.final_logits_bias[0, config.eos_token_id] += torch.quantile(margin, rate)
