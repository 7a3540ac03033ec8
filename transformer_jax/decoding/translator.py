"""A trained model loaded from its workdir, translating text; what `translate` and `evaluate`
share.

  translator = translator.Translator('/tmp/run', beam_size=4, alpha=0.6, average_last=5)
  german = translator.translate(['A man is sleeping.'])

Sentences are grouped by length into the buckets of `config.data.buckets` (`lengths`) and decoded
`batch_size` at a time, a bucket's last batch padded to as few sentences as a power of two of the
batch shards holds (`sentences_for`), so decoding compiles a few shapes per bucket, and loads from
JAX's persistent compilation cache what an earlier evaluation of the same shapes compiled. On a CPU,
several batches are decoded at once (`batches_at_once`). Output order is input order.
"""

import concurrent.futures
import contextlib
import os
import threading
from typing import Callable, Iterator, Sequence

from absl import flags, logging
import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from transformer_jax.config import checks
from transformer_jax.data import batching, pipeline, preprocessing, tokenizer
from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.decoding import batch_decode
from transformer_jax.model import sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.training import checkpointing, compilation, saved_config, together


def bucket_lengths(config) -> list[int]:
  """The lengths a source is padded to, the shortest that holds it: decoding's input shapes,
  and with `config.decode.max_extra_length` its length cap (§6.1: input length + 50)."""
  return batching.bucket_lengths(config.data.max_length, pipeline.buckets(config))


def batch_sentences(model: ShardedModel, batch_size: int) -> int:
  """The sentences of a decoding batch: `batch_size`, rounded up to a multiple of the batch
  shards."""
  shards = model.batch_shards
  return -(-batch_size // shards) * shards


def sentences_for(sentences: int, most: int, shards: int) -> int:
  """The sentences of a decoding batch of `sentences` sources, padding included, at most
  `most`: the batch shards doubled until they hold them, so that a bucket's last batch runs
  few all-padding sentences while the shapes compiled stay few (at most log2(most / shards) + 1
  a bucket)."""
  size = shards
  while size < sentences:
    size *= 2
  return min(size, most)


def batches_at_once(model: ShardedModel) -> int:
  """The batches a translator of `model` decodes at once: with the model on one CPU device, one
  a core the process may run on, each from a thread of its own (a decoding step's matrix
  products are too small for XLA to share one among cores); otherwise one: the batch is split
  over the devices already, and every process of several must run the same programs in the
  same order."""
  if jax.default_backend() != 'cpu' or jax.process_count() > 1 or model.mesh.devices.size > 1:
    return 1
  return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()


def decode_batches(lengths: list[int], sizes: np.ndarray, most: int
                   ) -> Iterator[tuple[int, list[int]]]:
  """(bucket length, the sources it decodes: at most `most`) for sources of `sizes` tokens
  (none longer than the last of `lengths`), the empty ones left out, longest bucket first
  (the slowest batches show early). A bucket's sources go to its batches by length, so that a
  batch's outputs end at about the same step: a batch decodes until its longest output ends."""
  bucket = np.searchsorted(lengths, sizes)
  for b in reversed(range(len(lengths))):
    members = [int(i) for i in np.flatnonzero(bucket == b) if sizes[i]]
    members.sort(key=lambda i: sizes[i])  # stable: equal lengths in input order
    for start in range(0, len(members), most):
      yield lengths[b], members[start:start + most]


def stacked_abstract_params(model: ShardedModel, runs: int):
  """The shapes and shardings of `runs` runs' parameters of `model`, stacked (`GroupTranslator`)."""
  return jax.tree.map(
      lambda p: jax.ShapeDtypeStruct((runs, *p.shape), p.dtype,
                                     sharding=sharding.stacked(p.sharding)),
      model.abstract_params)


def compile_translator(model: ShardedModel, config, runs: int, sizes: np.ndarray,
                       loss_batches: Iterator[dict], batch_size: int = 64, cached: bool = True
                       ) -> None:
  """Compiles, before the runs have trained, what the translator of `runs` runs of `model`
  (a `Translator` for one, a `GroupTranslator` for more; the decoding settings of
  `config.decode`, `batch_size`, `cached`) runs to decode sources of `sizes` tokens and to take
  the loss of `loss_batches` (local batches)."""
  decode = config.decode
  decoder = batch_decode.jit_decode(model, decode.beam_size, decode.alpha,
                                    decode.max_extra_length, cached, stacked=runs > 1)
  if runs > 1:
    params, eval_step = stacked_abstract_params(model, runs), _stacked_eval_step(model)
    _stack_params(model).lower([model.abstract_params] * runs).compile()
  else:
    params, eval_step = model.abstract_params, model.eval_step
  most = batch_sentences(model, batch_size)
  for length, size in sorted({(length, sentences_for(len(chunk), most, model.batch_shards))
                              for length, chunk in decode_batches(bucket_lengths(config), sizes,
                                                                  most)}):
    inputs = model.put_whole_batch({'inputs': np.zeros((size, length), np.int32)})
    decoder.lower(params, inputs['inputs']).compile()
  shapes = set()
  for local_batch in loss_batches:
    shape = tuple(sorted((name, value.shape) for name, value in local_batch.items()))
    if shape not in shapes:
      shapes.add(shape)
      eval_step.lower(params, model.put_batch(local_batch)).compile()


def _stack_params(model: ShardedModel) -> Callable:
  """Jitted: a list of runs' parameters -> the parameters stacked on a leading run axis."""
  return model.program(('stack params',), lambda: jax.jit(
      lambda trees: jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees),
      out_shardings=batch_decode.stacked_params_sharding(model)))


def _stacked_eval_step(model: ShardedModel) -> Callable:
  """Jitted: (stacked parameters, batch) -> each run's `ShardedModel.eval_step`."""
  return model.program(('stacked eval_step',), lambda: jax.jit(
      jax.vmap(model._eval_step, in_axes=(0, None)),  # pylint: disable=protected-access
      in_shardings=(batch_decode.stacked_params_sharding(model), model.batch_sharding)))


class Translator:
  """The parameters of a workdir's last `average_last` checkpoints, averaged (§6.1), on every
  device, with the decoding settings of `config.decode` unless given here; `model`, the
  workdir's model built already (the programs compiled on it reused), or a new one."""

  def __init__(self, workdir: str, *, beam_size: int | None = None, alpha: float | None = None,
               average_last: int | None = None, batch_size: int = 64, cached: bool = True,
               model: ShardedModel | None = None):
    # The saved config and the decoding settings given here enter together: validated once.
    config = saved_config.read_config(workdir)
    for field, value in (('beam_size', beam_size), ('alpha', alpha),
                         ('average_last', average_last)):
      if value is not None:
        config.decode[field] = value
    checks.validate(config)
    if batch_size <= 0:
      raise ValueError(f'--batch_size must be a positive integer, got {batch_size}')
    compilation.use_cache(config)
    self.config = config
    self.workdir = workdir
    self.workdirs = [workdir]  # the runs: one here, several in a `GroupTranslator`
    self.cached = cached
    if model is not None and model.config.model.to_dict() != config.model.to_dict():
      raise ValueError(f'{workdir}: the model given to translate with is not the workdir\'s '
                       '(config.model differs)')
    self.model = ShardedModel(config) if model is None else model
    self.tokenizer = tokenizer.load(os.path.join(workdir, tokenizer.MODEL_FILENAME))
    self.preprocessing = preprocessing.from_config(config.data)
    with contextlib.closing(checkpointing.Checkpoints(workdir)) as checkpoints:
      self.params, self.steps = checkpoints.average_last(config.decode.average_last,
                                                         self.model.abstract_params)
    if len(self.steps) < config.decode.average_last:
      logging.warning('averaging the %d checkpoints %s: fewer than the %d asked for',
                      len(self.steps), self.steps, config.decode.average_last)
    self.batch_sentences = batch_sentences(self.model, batch_size)
    self.lengths = bucket_lengths(config)
    decode = config.decode
    self._decode = batch_decode.jit_decode(self.model, decode.beam_size, decode.alpha,
                                           decode.max_extra_length, cached)

  def settings(self) -> str:
    """What the translations come from: the workdir, the checkpoints averaged, beam and α."""
    decode = self.config.decode
    return (f'{self.workdir}: checkpoints {self.steps} averaged, beam {decode.beam_size}, '
            f'alpha {decode.alpha}')

  def encode(self, texts: Sequence[str], source: str = '<input>', *, side: str = 'source',
             truncate: bool = True) -> list[np.ndarray]:
    """Token ids (EOS-terminated) of each text, preprocessed as the `side` ('source' or
    'target') of a training pair; empty for an empty text. A text longer than
    `config.data.max_length` tokens is truncated to it, with a warning naming `source` and its
    line number (1-based), or with `truncate=False` is a ValueError naming them."""
    max_length = self.config.data.max_length
    preprocess = {'source': self.preprocessing.source, 'target': self.preprocessing.target}[side]
    ids = tokenizer.encode(self.tokenizer, [preprocess(text) for text in texts])
    for line, (text, sentence) in enumerate(zip(texts, ids), start=1):
      if not text.strip():
        ids[line - 1] = np.zeros((0,), np.int32)
      elif len(sentence) > max_length:
        message = (f'{source}:{line}: {len(sentence)} tokens, more than the model\'s maximum of '
                   f'{max_length} (config.data.max_length)')
        if not truncate:
          raise ValueError(message)
        logging.warning('%s; translating the first %d', message, max_length - 1)
        ids[line - 1] = np.append(sentence[:max_length - 1], EOS_ID).astype(np.int32)
    return ids

  def translate_ids(self, sources: Sequence[np.ndarray], progress: bool = False
                    ) -> list[list[int]]:
    """Output ids (without EOS) of each source; [] for an empty source. A source longer than
    `config.data.max_length` is a ValueError (`encode` truncates texts to it)."""
    return self.translate_ids_per_run(sources, progress)[0]

  def translate_ids_per_run(self, sources: Sequence[np.ndarray], progress: bool = False
                            ) -> list[list[list[int]]]:
    """`translate_ids` of each run (`workdirs`): one list for a `Translator`, one a run for a
    `GroupTranslator`."""
    outputs = [[[] for _ in sources] for _ in self.workdirs]
    for i, decoded in self._decoded(sources, progress):
      for run, output in zip(outputs, decoded.reshape(len(self.workdirs), -1)):
        run[i] = batch_decode.strip(output)
    return outputs

  def _decoded(self, sources: Sequence[np.ndarray], progress: bool
               ) -> Iterator[tuple[int, np.ndarray]]:
    """(i, output ids of source i: (length,), or (runs, length) of a `GroupTranslator`) for each
    non-empty source, longest bucket first."""
    max_length, sizes = self.config.data.max_length, np.array([len(s) for s in sources])
    too_long = np.flatnonzero(sizes > max_length)
    if len(too_long):
      raise ValueError(f'source {too_long[0]} has {sizes[too_long[0]]} tokens, more than '
                       f'config.data.max_length={max_length} ({len(too_long)} such sources)')

    caller = threading.get_ident()

    def decode(batch: tuple[int, list[int]]) -> np.ndarray:
      length, chunk = batch
      size = sentences_for(len(chunk), self.batch_sentences, self.model.batch_shards)
      inputs = np.full((size, length), PAD_ID, np.int32)
      for entry, i in enumerate(chunk):
        inputs[entry, :len(sources[i])] = sources[i]
      with compilation.charged_to(caller):  # what it compiles, the caller's (`evaluate` says)
        placed = self.model.put_whole_batch({'inputs': inputs})
        return sharding.gather_sequences(self._decode(self.params, placed['inputs']))

    batches = list(decode_batches(self.lengths, sizes, self.batch_sentences))
    with tqdm.tqdm(total=len(sources), disable=not progress, unit='sentence',
                   dynamic_ncols=True) as bar, concurrent.futures.ThreadPoolExecutor(
                       batches_at_once(self.model)) as threads:
      for (_, chunk), result in zip(batches, threads.map(decode, batches)):
        for entry, i in enumerate(chunk):
          yield i, result[entry]
        bar.update(len(chunk))
      bar.update(len(sources) - bar.n)  # the empty ones

  def translate(self, texts: Sequence[str], source: str = '<input>',
                progress: bool = False) -> list[str]:
    """One translation per text, in order; an empty text gives an empty translation."""
    return [self.text(ids) for ids in self.translate_ids(self.encode(texts, source), progress)]

  def text(self, ids: Sequence[int]) -> str:
    """Output ids (without EOS) as running text; '' for none."""
    return self.preprocessing.restore(self.tokenizer.decode(list(ids))) if len(ids) else ''

  def eval_step_per_run(self, batch: dict) -> list[dict]:
    """`ShardedModel.eval_step` of each run (`workdirs`) on a batch on the mesh: the loss's
    sums, dropout off."""
    return [self.model.eval_step(self.params, batch)]


class GroupTranslator(Translator):
  """The workdirs of runs of one model shape (a sweep's group, `together.check_together`)
  translating as one program: their parameters stacked on a leading run axis, as the training
  step stacks the runs' states (`together`), and the decoder and the loss vmapped over it, so
  that a batch of every run is one dispatch. The decoding settings are the first workdir's
  unless given; each run averages its own last `average_last` checkpoints (`steps`: one list a
  run).

    group = GroupTranslator(['/tmp/sweep/B1', '/tmp/sweep/B1_seed1'], beam_size=4, alpha=0.6,
                            average_last=1)
    b1, b1_seed1 = group.translate_ids_per_run(group.encode(texts))
  """

  def __init__(self, workdirs: Sequence[str], **settings):
    super().__init__(workdirs[0], **settings)  # `model` too: the model of every run
    together.check_together([saved_config.read_config(workdir) for workdir in workdirs],
                            list(workdirs))
    self.workdirs = list(workdirs)
    params, self.steps = [self.params], [self.steps]
    for workdir in workdirs[1:]:
      with contextlib.closing(checkpointing.Checkpoints(workdir)) as checkpoints:
        run_params, steps = checkpoints.average_last(self.config.decode.average_last,
                                                     self.model.abstract_params)
      params.append(run_params)
      self.steps.append(steps)
    model, decode = self.model, self.config.decode
    self.params = _stack_params(model)(params)
    self._decode = batch_decode.jit_decode(model, decode.beam_size, decode.alpha,
                                           decode.max_extra_length, self.cached, stacked=True)
    self._eval_step = _stacked_eval_step(model)

  def settings(self) -> str:
    decode = self.config.decode
    return (f'{", ".join(self.workdirs)}: checkpoints {self.steps} averaged, beam '
            f'{decode.beam_size}, alpha {decode.alpha}')

  def eval_step_per_run(self, batch: dict) -> list[dict]:
    sums = jax.device_get(self._eval_step(self.params, batch))  # each run's taken on the host
    return [{name: value[run] for name, value in sums.items()}
            for run in range(len(self.workdirs))]


def define_translator_flags() -> Callable[[], Translator]:
  """Defines the flags of a command that loads a trained workdir to decode with (`translate`,
  `evaluate`); returns the function that builds its `Translator` from them."""
  workdir = flags.DEFINE_string('workdir', None, 'A training run\'s directory.', required=True)
  beam_size = flags.DEFINE_integer('beam_size', None, 'Beam size; 1 = greedy '
                                   '(default: config.decode.beam_size).')
  alpha = flags.DEFINE_float('alpha', None, 'Length penalty α (default: config.decode.alpha).')
  average_last = flags.DEFINE_integer('average_last', None, 'Average the parameters of the '
                                      'last K checkpoints (default: config.decode.average_last).')
  batch_size = flags.DEFINE_integer('batch_size', 64, 'Sentences decoded at once.')
  return lambda: Translator(workdir.value, beam_size=beam_size.value, alpha=alpha.value,
                            average_last=average_last.value, batch_size=batch_size.value)
