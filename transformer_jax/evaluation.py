"""Evaluation on a split: loss, per-token perplexity (Table 3's PPL), token accuracy, and
corpus BLEU of greedy translations (sacreBLEU on detokenized text).

References are the target token ids decoded back to text, so BLEU here follows the
vocabulary's round trip (exact for SentencePiece except for unknown characters).
"""

import itertools
import math

import jax
from jax.experimental import multihost_utils
import numpy as np
import sacrebleu

from transformer_jax import decoding
from transformer_jax.data import pipeline, tokenizer
from transformer_jax.steps import Trainer


def _gather(array: jax.Array) -> np.ndarray:
  """A global array's rows from every process."""
  if jax.process_count() == 1:
    return np.asarray(array)
  return np.asarray(multihost_utils.process_allgather(array, tiled=True))


class Evaluator:
  """Jits greedy decoding once per input shape and evaluates a split of `data`."""

  def __init__(self, trainer: Trainer, data: pipeline.Data):
    self._trainer = trainer
    self._data = data
    max_extra = trainer.config.decode.max_extra_length
    self._greedy = jax.jit(
        lambda params, inputs: decoding.greedy(trainer.eval_model, params, inputs, max_extra),
        in_shardings=(trainer.state_sharding.params, trainer.batch_sharding),
        out_shardings=trainer.batch_sharding)

  def __call__(self, params, split: str, num_batches: int = -1, bleu: bool = True) -> dict:
    """Metrics over the first `num_batches` batches of `split` (-1: all of it)."""
    batches = self._data.eval_batches(split, jax.process_index(), jax.process_count())
    if num_batches > 0:
      batches = itertools.islice(batches, num_batches)
    totals = {'loss': 0.0, 'nll': 0.0, 'correct': 0.0, 'tokens': 0.0}
    hypotheses, references = [], []
    for local_batch in batches:
      batch = self._trainer.put_batch(local_batch)
      sums = self._trainer.eval_step(params, batch)
      for name in totals:
        totals[name] += float(sums[name])
      if bleu:
        outputs = _gather(self._greedy(params, batch['inputs']))
        targets = _gather(batch['targets'])
        for output, target in zip(outputs, targets):
          if target[0] != 0:  # skip the empty rows that fill a bucket's last batch
            hypotheses.append(tokenizer.decode(self._data.tokenizer, decoding.strip(output)))
            references.append(tokenizer.decode(self._data.tokenizer, decoding.strip(target)))
    tokens = max(totals['tokens'], 1.0)
    metrics = {
        'loss': totals['loss'] / tokens,
        'nll': totals['nll'] / tokens,
        'perplexity': math.exp(totals['nll'] / tokens),
        'accuracy': totals['correct'] / tokens,
    }
    if bleu:
      metrics['bleu'] = sacrebleu.corpus_bleu(hypotheses, [references]).score
    return metrics
