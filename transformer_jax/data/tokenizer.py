"""One SentencePiece vocabulary shared by source and target (§5.1: byte-pair encoding with a
shared source-target vocabulary of about 37000 tokens).

Fixed ids: 0 = padding (also the decoder's start symbol, as in tensor2tensor), 1 = end of
sentence, 2 = unknown. There is no beginning-of-sentence token.
"""

import itertools
import os
from typing import Sequence

from absl import logging
from etils import epath
import numpy as np
import sentencepiece as spm

from transformer_jax.storage import atomic, buckets

# Token id 0 is padding everywhere in the project (batches, attention masks, loss).
PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
MODEL_FILENAME = 'spm.model'


def train(texts: Sequence[str], model_path: str, vocab_size: int, model_type: str,
          max_corpus_chars: int, seed: int) -> None:
  """Learns the vocabulary from `texts` (source and target training sentences) and writes the
  model to `model_path` atomically. When the texts hold more than `max_corpus_chars`
  characters, a seeded random sample of sentences up to that many characters is used."""
  order = np.random.default_rng(seed).permutation(len(texts))
  sample, chars = [], 0
  for i in order:
    if chars >= max_corpus_chars:
      break
    sample.append(texts[i])
    chars += len(texts[i])
  logging.info('training a %d-token %s vocabulary on %d sentences (%d characters)', vocab_size,
               model_type, len(sample), chars)
  epath.Path(buckets.absolute(model_path)).parent.mkdir(parents=True, exist_ok=True)
  with atomic.replacing(model_path) as temporary, open(temporary, 'wb') as f:
    try:
      spm.SentencePieceTrainer.train(
          sentence_iterator=iter(sample), model_writer=f, vocab_size=vocab_size,
          model_type=model_type, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
          character_coverage=1.0, input_sentence_size=0,
          minloglevel=2, num_threads=os.cpu_count() or 1)
    except RuntimeError as e:
      raise ValueError(f'cannot learn config.data.vocab_size={vocab_size} tokens from '
                       f'{len(sample)} sentences: {e}') from e


def load(model_path: str) -> spm.SentencePieceProcessor:
  """Loads a model file (local or in a bucket) and checks its special ids."""
  if not epath.Path(model_path).is_file():
    raise FileNotFoundError(f'SentencePiece model not found: {model_path}')
  processor = spm.SentencePieceProcessor(model_proto=epath.Path(model_path).read_bytes())
  ids = (processor.pad_id(), processor.eos_id(), processor.unk_id())
  if ids != (PAD_ID, EOS_ID, UNK_ID):
    raise ValueError(f'{model_path}: pad/eos/unk ids are {ids}, expected '
                     f'{(PAD_ID, EOS_ID, UNK_ID)}')
  return processor


def encode(processor: spm.SentencePieceProcessor, texts: Sequence[str]) -> list[np.ndarray]:
  """Token ids of each text followed by EOS_ID."""
  pieces = processor.encode(list(texts), out_type=int, num_threads=os.cpu_count() or 1)
  return [np.array(ids + [EOS_ID], np.int32) for ids in pieces]


def encode_flat(processor: spm.SentencePieceProcessor, texts: Sequence[str],
                dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
  """`encode` end to end: (the token ids of all texts in one array of `dtype`, each text's
  followed by EOS_ID; the number of ids of each text, EOS_ID included)."""
  pieces = processor.encode(list(texts), out_type=int, num_threads=os.cpu_count() or 1)
  lengths = np.fromiter(map(len, pieces), np.int64, len(pieces)) + 1
  ids = np.full(int(lengths.sum()), EOS_ID, dtype)
  words = np.ones(len(ids), bool)
  words[np.cumsum(lengths) - 1] = False
  ids[words] = np.fromiter(itertools.chain.from_iterable(pieces), dtype,
                           int(lengths.sum()) - len(pieces))
  return ids, lengths


def decode(processor: spm.SentencePieceProcessor, ids) -> str:
  """Text of `ids`, cut at the first EOS_ID and with padding removed."""
  ids = [int(i) for i in ids]
  if EOS_ID in ids:
    ids = ids[:ids.index(EOS_ID)]
  return processor.decode([i for i in ids if i != PAD_ID])
