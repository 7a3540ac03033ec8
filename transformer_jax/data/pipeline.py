"""The data pipeline: dataset splits -> one shared vocabulary -> token ids -> batches.

  data = pipeline.load(config, workdir, rows_multiple=trainer.rows_multiple)
  train = data.train_iterator(seed=config.seed)   # endless, restorable batches
  for batch in data.eval_batches('validation'): ...

The vocabulary is learned once from the training split and saved as `workdir/spm.model`; a
resumed run (or `config.data.spm_model`) reuses it.
"""

import dataclasses
import os
from typing import Iterator

from absl import logging
import jax
import ml_collections
import sentencepiece as spm

from transformer_jax.data import batching, datasets, preprocessing, tokenizer

SPLITS = ('train', 'validation', 'test')


@dataclasses.dataclass(frozen=True)
class Data:
  """A tokenizer and a batcher per split."""

  tokenizer: spm.SentencePieceProcessor
  batchers: dict[str, batching.Batcher]

  def train_iterator(self, seed: int, process_index: int = 0,
                     process_count: int = 1) -> batching.TrainIterator:
    return batching.TrainIterator(self.batchers['train'], seed, process_index, process_count)

  def eval_batches(self, split: str, process_index: int = 0,
                   process_count: int = 1) -> Iterator[dict]:
    return batching.eval_batches(self.batchers[split], process_index, process_count)


def on_accelerator() -> bool:
  """Whether JAX computes on GPUs or TPUs, where every new batch shape costs 10-30 s of
  compiling (a CPU compiles one in seconds)."""
  return jax.default_backend() != 'cpu'


def buckets(config: ml_collections.ConfigDict) -> str:
  """`config.data.buckets`, 'auto' resolved: 'fine' on a CPU, 'coarse' on an accelerator."""
  if config.data.buckets != 'auto':
    return config.data.buckets
  return 'coarse' if on_accelerator() else 'fine'


def pack_length(config: ml_collections.ConfigDict) -> int:
  """`config.data.pack_length`, None resolved: 0 (no packing) on a CPU, `data.max_length` on
  an accelerator (one training batch shape)."""
  if config.data.pack_length is not None:
    return config.data.pack_length
  return config.data.max_length if on_accelerator() else 0


def vocabulary(config: ml_collections.ConfigDict, workdir: str,
               train_pairs: list[tuple[str, str]]) -> spm.SentencePieceProcessor:
  """`config.data.spm_model` if given, else `workdir/spm.model`, learned first if missing."""
  path = config.data.spm_model or os.path.join(workdir, tokenizer.MODEL_FILENAME)
  if _to_learn(config, workdir):
    texts = [text for pair in train_pairs for text in pair]
    tokenizer.train(texts, path, config.data.vocab_size, config.data.spm_model_type,
                    config.data.max_corpus_chars, config.seed)
  processor = tokenizer.load(path)
  if processor.vocab_size() != config.data.vocab_size:
    raise ValueError(f'{path} has {processor.vocab_size()} tokens but config.data.vocab_size is '
                     f'{config.data.vocab_size}')
  return processor


def _to_learn(config: ml_collections.ConfigDict, workdir: str) -> bool:
  """Whether the vocabulary is neither given nor saved in `workdir`, so must be learned."""
  return not (config.data.spm_model
              or os.path.exists(os.path.join(workdir, tokenizer.MODEL_FILENAME)))


def load(config: ml_collections.ConfigDict, workdir: str, rows_multiple: int = 1) -> Data:
  """Reads, preprocesses, tokenizes and plans every split; all input errors surface here,
  before training."""
  preprocess = preprocessing.from_config(config.data)
  # A given or saved vocabulary is checked first, before the (possibly long) data preparation.
  processor = None if _to_learn(config, workdir) else vocabulary(config, workdir, train_pairs=[])
  pairs = {split: [preprocess.pair(source, target)
                   for source, target in datasets.load_pairs(config.data, split)]
           for split in SPLITS}
  if processor is None:
    processor = vocabulary(config, workdir, pairs['train'])
  # A training batch's rows split into grad_accum_steps micro-batches over the batch axes; an
  # evaluation batch is one micro-batch.
  eval_rows_multiple = max(1, rows_multiple // config.train.grad_accum_steps)
  return Data(processor, {
      split: batcher(config, processor, pairs[split],
                     rows_multiple if split == 'train' else eval_rows_multiple, split)
      for split in SPLITS})


def batcher(config: ml_collections.ConfigDict, processor: spm.SentencePieceProcessor,
            pairs: list[tuple[str, str]], rows_multiple: int = 1,
            name: str = 'split') -> batching.Batcher:
  """Tokenizes (source, target) text pairs and plans their batches; pairs with a side longer
  than `config.data.max_length` tokens are dropped. Batches other than the 'train' split's
  hold one micro-batch's tokens (`tokens_per_batch / grad_accum_steps`): evaluation runs no
  accumulation, and beam search multiplies its rows by the beam."""
  sources = tokenizer.encode(processor, [source for source, _ in pairs])
  targets = tokenizer.encode(processor, [target for _, target in pairs])
  tokenized = batching.TokenizedSplit.from_pairs(sources, targets, config.data.max_length)
  logging.info('%s: %d pairs kept, %d longer than %d tokens dropped', name, len(tokenized),
               tokenized.num_dropped, config.data.max_length)
  if not len(tokenized):
    raise ValueError(f'the {name} split has no pairs left: all {tokenized.num_dropped} have a '
                     f'side longer than config.data.max_length={config.data.max_length} tokens')
  train = name == 'train'
  tokens_per_batch = config.data.tokens_per_batch
  if not train:
    tokens_per_batch //= config.train.grad_accum_steps
  return batching.Batcher(tokenized, config.data.max_length, tokens_per_batch, rows_multiple,
                          pack_length(config) if train else 0, buckets(config))
