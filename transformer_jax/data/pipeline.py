"""The data pipeline: dataset splits -> one shared vocabulary -> token ids -> batches.

  data = pipeline.load(config, workdir, sequences_multiple=trainer.sequences_multiple)
  train = data.train_iterator(seed=config.seed)   # endless, restorable batches
  for batch in data.eval_batches('validation'): ...

The vocabulary is learned once from a sample of the training split and saved as
`workdir/spm.model`; a resumed run (or `config.data.spm_model`) reuses it. Each split is
encoded once, streamed into `workdir/tokens` (`token_store`), and read from there memory-mapped.
`prepare` does the same into a shared place once for runs on many hosts, which then read the
vocabulary and the splits from there (`config.data.prepared`, `prepared`).
"""

import collections.abc
import dataclasses
import functools
import os
import time
from typing import Iterator, Sequence

from absl import logging
from etils import epath
import ml_collections
import numpy as np
import sentencepiece as spm

from transformer_jax.config import platforms
from transformer_jax.data import batching, datasets, prepared, preprocessing, token_store
from transformer_jax.data import tokenizer

# Pairs read at a time for the vocabulary's sample.
_SAMPLE_CHUNK = 10_000


@dataclasses.dataclass(frozen=True)
class Data:
  """A tokenizer, a batcher per split, and the seconds each stage of loading took."""

  tokenizer: spm.SentencePieceProcessor
  batchers: dict[str, batching.Batcher]
  seconds: dict[str, float] = dataclasses.field(default_factory=dict)

  def train_iterator(self, seed: int, process_index: int = 0,
                     process_count: int = 1) -> batching.TrainIterator:
    return batching.TrainIterator(self.batchers['train'], seed, process_index, process_count)

  def eval_batches(self, split: str, process_index: int = 0,
                   process_count: int = 1) -> Iterator[dict]:
    return batching.eval_batches(self.batchers[split], process_index, process_count)


def loading(seconds: dict[str, float]) -> str:
  """`Data.seconds` as text: 'vocabulary 0.9 s, prepare 0.0 s, encode 0.9 s'."""
  return ', '.join(f'{stage} {stage_seconds:.1f} s' for stage, stage_seconds in seconds.items())


def on_accelerator(platform: str | None = None) -> bool:
  """Whether `platform` (None: JAX's in this process) is GPUs or TPUs, where every new batch
  shape costs a compilation many times as long as a CPU's."""
  return (platform or platforms.current()) != 'cpu'


def buckets(config: ml_collections.ConfigDict, platform: str | None = None) -> str:
  """`config.data.buckets`, 'auto' resolved: 'fine' on a CPU, 'coarse' on an accelerator."""
  if config.data.buckets != 'auto':
    return config.data.buckets
  return 'coarse' if on_accelerator(platform) else 'fine'


def pack_length(config: ml_collections.ConfigDict, platform: str | None = None) -> int:
  """`config.data.pack_length`, None resolved: 0 (no packing) on a CPU, `data.max_length` on
  an accelerator (one training batch shape)."""
  if config.data.pack_length is not None:
    return config.data.pack_length
  return config.data.max_length if on_accelerator(platform) else 0


def vocabulary(config: ml_collections.ConfigDict, workdir: str,
               train: Sequence[tuple[str, str]] = ()) -> spm.SentencePieceProcessor:
  """`config.data.spm_model` if given, else `workdir/spm.model`, learned first if missing
  from a sample of the `train` pairs (`vocabulary_sample`)."""
  path = config.data.spm_model or os.path.join(workdir, tokenizer.MODEL_FILENAME)
  if _to_learn(config, workdir):
    tokenizer.train(vocabulary_sample(train, config.data.max_corpus_chars, config.seed), path,
                    config.data.vocab_size, config.data.spm_model_type,
                    config.data.max_corpus_chars, config.seed)
  processor = tokenizer.load(path)
  if processor.vocab_size() != config.data.vocab_size:
    raise ValueError(f'{path} has {processor.vocab_size()} tokens but config.data.vocab_size is '
                     f'{config.data.vocab_size}')
  return processor


def vocabulary_sample(pairs: Sequence[tuple[str, str]], max_chars: int, seed: int) -> list[str]:
  """Source and target sentences of seeded random pairs, read until they hold `max_chars`
  characters (all pairs when they hold fewer), in corpus order: a corpus of millions of pairs
  is not read whole to learn the vocabulary (`tokenizer.train` then samples sentences)."""
  order = np.random.default_rng(seed).permutation(len(pairs))
  chosen, chars = {}, 0
  for start in range(0, len(order), _SAMPLE_CHUNK):
    if chars >= max_chars:
      break
    indices = order[start:start + _SAMPLE_CHUNK]
    in_order = np.sort(indices)  # read in corpus order, taken in the sample's
    read = dict(zip(in_order.tolist(), pairs.take(in_order)))
    for i in indices.tolist():
      if chars >= max_chars:
        break
      chosen[i] = read[i]
      chars += len(read[i][0]) + len(read[i][1])
  return [text for i in sorted(chosen) for text in chosen[i]]


class _Pairs(collections.abc.Sequence):
  """A split's examples as preprocessed (source, target) texts, read a slice or a list of
  indices at a time."""

  def __init__(self, examples: Sequence[dict], config: ml_collections.ConfigDict,
               preprocess: preprocessing.Preprocessing):
    self._examples, self._config, self._preprocess = examples, config, preprocess

  def __len__(self) -> int:
    return len(self._examples)

  def _pairs(self, examples: list[dict]) -> list[tuple[str, str]]:
    return [self._preprocess.pair(*datasets.source_target(example, self._config.data))
            for example in examples]

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self._pairs(self._examples[index])
    return self._pairs([self._examples[index]])[0]

  def take(self, indices: Sequence[int]) -> list[tuple[str, str]]:
    return self._pairs(self._examples.take(indices))


def _identity(config: ml_collections.ConfigDict, split: str,
              processor: spm.SentencePieceProcessor) -> dict:
  """What a split's token ids are encoded from (`token_store`): the dataset (its name changes
  with its content), the vocabulary, the preprocessing and the direction."""
  return {'dataset': datasets.dataset_name(config.data, split),
          'vocabulary': prepared.digest(processor),
          'preprocessing': config.data.preprocessing,
          'source_lang': config.data.source_lang, 'target_lang': config.data.target_lang}


def _to_learn(config: ml_collections.ConfigDict, workdir: str) -> bool:
  """Whether the vocabulary is neither given nor saved in `workdir`, so must be learned."""
  return not (config.data.spm_model
              or epath.Path(workdir, tokenizer.MODEL_FILENAME).exists())


class _Laps:
  """The seconds each stage of loading took, by stage: `lap(stage)` ends one."""

  def __init__(self):
    self.seconds = {}
    self._clock = time.perf_counter()

  def __call__(self, stage: str) -> None:
    now = time.perf_counter()
    self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._clock
    self._clock = now


def load(config: ml_collections.ConfigDict, workdir: str, sequences_multiple: int = 1) -> Data:
  """Prepares (or opens) every split, learns (or loads) the vocabulary, encodes the splits into
  `workdir/tokens` (or opens them there: `token_store`) and plans their batches; all input
  errors surface here, before training. `Data.seconds` says how long each stage took.
  With `config.data.prepared` set, reads the vocabulary and the splits from there instead
  (`open_prepared`), and writes nothing."""
  if config.data.prepared:
    return open_prepared(config, sequences_multiple)
  lap = _Laps()
  preprocess = preprocessing.from_config(config.data)
  # A given or saved vocabulary is checked first, before the (possibly long) data preparation.
  processor = None if _to_learn(config, workdir) else vocabulary(config, workdir)
  lap('vocabulary')
  splits = datasets.splits(config.data)
  sides = dict.fromkeys(splits)
  if processor is not None:
    sides = {split: token_store.saved(workdir, split, _identity(config, split, processor))
             for split in splits}
    lap('open_tokens')
  # Every split to encode is prepared (its files checked) before anything is learned or
  # written into the workdir.
  pairs = {split: _Pairs(datasets.load_split(config.data, split), config, preprocess)
           for split in splits if sides[split] is None}
  if pairs:
    lap('prepare')
  if processor is None:
    processor = vocabulary(config, workdir, pairs['train'])
    lap('vocabulary')
  dtype = np.uint16 if processor.vocab_size() <= 2**16 else np.int32
  for split, split_pairs in pairs.items():
    sides[split] = token_store.write(
        workdir, split, split_pairs,
        functools.partial(tokenizer.encode_flat, processor, dtype=dtype),
        _identity(config, split, processor), dtype)
  if pairs:
    lap('encode')
  return _planned(config, processor, sides, sequences_multiple, lap.seconds)


def prepare(config: ml_collections.ConfigDict, output: str) -> Data:
  """Prepares `config`'s data once for runs on any number of processes and hosts: learns the
  vocabulary and encodes every split into `output` (a directory or a bucket's path) as `load`
  does into a workdir, with their record (`prepared`); the dataset itself is prepared where
  `config.data.tfds_data_dir` says. Ids already encoded there for the same data are kept."""
  config = datasets.with_absolute_files(config)  # a copy
  config.data.prepared = None
  prepared.begin(config, output)
  data = load(config, output)
  prepared.finish(config, output, prepared.digest(data.tokenizer),
                  {split: _identity(config, split, data.tokenizer)
                   for split in data.batchers})
  return data


def open_prepared(config: ml_collections.ConfigDict, sequences_multiple: int = 1) -> Data:
  """The vocabulary and the encoded splits of `config.data.prepared` (`prepare`), checked
  against `config` (`prepared.check`), their batches planned; reads no text and writes
  nothing, so that every process of a run opens them at once."""
  lap = _Laps()
  place = config.data.prepared
  record = prepared.check(config)
  path = os.path.join(place, tokenizer.MODEL_FILENAME)
  processor = tokenizer.load(path)
  if prepared.digest(processor) != record['vocabulary']:
    raise ValueError(f'{path} is not the vocabulary config.data.prepared={place} was prepared '
                     f'with ({prepared.RECORD} names another): prepare it again')
  lap('vocabulary')
  sides = {}
  for split in datasets.splits(config.data):
    sides[split] = token_store.saved(place, split, record['splits'].get(split, {}))
    if sides[split] is None:
      raise ValueError(f'config.data.prepared={place}: its {split} split '
                       f'({token_store.DIRECTORY}/{split}.*) is missing or damaged: prepare it '
                       'again')
  lap('open_tokens')
  return _planned(config, processor, sides, sequences_multiple, lap.seconds)


def _planned(config: ml_collections.ConfigDict, processor: spm.SentencePieceProcessor,
             sides: dict, sequences_multiple: int, seconds: dict[str, float]) -> Data:
  """The `Data` of each split's encoded (sources, targets) in `sides`, batches planned."""
  tokenized = {split: batching.TokenizedSplit.from_pairs(*sides[split], config.data.max_length)
               for split in sides}
  # A training batch's sequences split into grad_accum_steps micro-batches over the batch axes;
  # an evaluation batch is one micro-batch.
  eval_multiple = max(1, sequences_multiple // config.train.grad_accum_steps)
  batchers = {split: _batcher(config, tokenized[split],
                              sequences_multiple if split == 'train' else eval_multiple, split)
              for split in tokenized}
  return Data(processor, batchers, seconds)


def batcher(config: ml_collections.ConfigDict, processor: spm.SentencePieceProcessor,
            pairs: list[tuple[str, str]], sequences_multiple: int = 1,
            name: str = 'split') -> batching.Batcher:
  """Tokenizes (source, target) text pairs in memory and plans their batches (`_batcher`)."""
  sources = tokenizer.encode(processor, [source for source, _ in pairs])
  targets = tokenizer.encode(processor, [target for _, target in pairs])
  return _batcher(config, batching.TokenizedSplit.from_pairs(sources, targets,
                                                              config.data.max_length),
                  sequences_multiple, name)


def _batcher(config: ml_collections.ConfigDict, tokenized: batching.TokenizedSplit,
             sequences_multiple: int, name: str) -> batching.Batcher:
  """Plans a tokenized split's batches; pairs with a side longer than `config.data.max_length`
  tokens were dropped. Batches other than the 'train' split's hold one micro-batch's tokens
  (`tokens_per_batch / grad_accum_steps`): evaluation runs no accumulation, and beam search
  multiplies its sequences by the beam."""
  logging.info('%s: %d pairs kept, %d longer than %d tokens dropped', name, len(tokenized),
               tokenized.num_dropped, config.data.max_length)
  if not len(tokenized):
    raise ValueError(f'the {name} split has no pairs left: all {tokenized.num_dropped} have a '
                     f'side longer than config.data.max_length={config.data.max_length} tokens')
  train = name == 'train'
  tokens_per_batch = config.data.tokens_per_batch
  if not train:
    tokens_per_batch //= config.train.grad_accum_steps
  return batching.Batcher(tokenized, config.data.max_length, tokens_per_batch, sequences_multiple,
                          pack_length(config) if train else 0, buckets(config))
