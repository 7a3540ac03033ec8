r"""Scores a trained workdir on a whole split as the paper did (§6.1): beam search, averaged
checkpoints, BLEU; and the per-token perplexity of Table 3.

  python -m transformer_jax.evaluate --workdir=DIR --split=test [--json] \
      [--beam_size=4] [--alpha=0.6] [--average_last=5] [--batch_size=64]

Every source sentence of the split is translated (one too long for the model is truncated,
with a warning). Reported, each labelled: sacreBLEU on detokenized text with its signature;
the paper's tokenized, compound-split, cased BLEU; the same lowercased (Multi30k papers' usual
figure); per-token perplexity of the references (pairs longer than config.data.max_length are
left out of it and counted); the number of sentences; decoding time. The translations go to
`DIR/eval/<name>.txt` and the figures to `DIR/eval/<name>.json`, where the name records the
split, checkpoints and decoding settings.
"""

import json
import math
import os
import sys
import time

from absl import app, flags
import jax

from transformer_jax import bleu, checkpointing, config_lib, inference, translate
from transformer_jax.data import batching, datasets, pipeline

_SPLIT = flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Which split.')
_JSON = flags.DEFINE_boolean('json', False, 'Print the figures as one JSON object.')


def perplexity(translator: inference.Translator, pairs: list[tuple[str, str]]) -> dict:
  """Per-token perplexity of the references given their sources (teacher forcing, no
  dropout), over the pairs that fit config.data.max_length."""
  trainer = translator.trainer
  batcher = pipeline.batcher(translator.config, translator.tokenizer, pairs,
                             trainer.batch_shards)
  nll = tokens = 0.0
  for batch in batching.eval_batches(batcher, jax.process_index(), jax.process_count()):
    sums = trainer.eval_step(translator.params, trainer.put_batch(batch))
    nll, tokens = nll + float(sums['nll']), tokens + float(sums['tokens'])
  return {'perplexity': math.exp(nll / max(tokens, 1.0)), 'perplexity_pairs': len(batcher.split),
          'perplexity_pairs_too_long': batcher.split.num_dropped}


def evaluate(translator: inference.Translator, workdir: str, split: str) -> dict:
  """Translates and scores `split`; writes the translations and the figures under
  `workdir/eval/` and returns the figures."""
  config = translator.config
  pairs = [datasets.source_target(example, config.data)
           for example in datasets.load_split(config.data, split)]
  sources, references = [s for s, _ in pairs], [t for _, t in pairs]
  start = time.perf_counter()
  hypotheses = translator.translate(sources, f'{split} source', progress=True)
  seconds = time.perf_counter() - start
  decode = config.decode
  name = (f'{split}-step{translator.steps[-1]}-avg{len(translator.steps)}'
          f'-beam{decode.beam_size}-alpha{decode.alpha:g}')
  directory = os.path.join(workdir, 'eval')
  hypothesis_path = os.path.join(directory, f'{name}.txt')
  lead = jax.process_index() == 0
  if lead:
    os.makedirs(directory, exist_ok=True)
    translate.write_lines(hypotheses, hypothesis_path)
  scores = bleu.scores(hypotheses, references, config.data.target_lang)
  result = {
      'split': split,
      'sentences': len(sources),
      'checkpoint_steps': translator.steps,
      'beam_size': decode.beam_size,
      'alpha': decode.alpha,
      'bleu_detokenized': scores['detokenized'],
      'sacrebleu_signature': scores['signature'],
      'bleu_tokenized': scores['tokenized'],
      'bleu_tokenized_lowercase': scores['tokenized_lowercase'],
      **perplexity(translator, pairs),
      'decode_seconds': seconds,
      'sentences_per_second': len(sources) / seconds,
      'hypotheses': hypothesis_path,
  }
  if lead:
    checkpointing.atomic_write(os.path.join(directory, f'{name}.json'),
                               json.dumps(result, indent=2))
  return result


def _report(result: dict) -> str:
  return '\n'.join([
      f'{result["split"]}: {result["sentences"]} sentences, checkpoints '
      f'{result["checkpoint_steps"]} averaged, beam {result["beam_size"]}, '
      f'alpha {result["alpha"]}',
      f'BLEU (sacreBLEU, detokenized)          {result["bleu_detokenized"]:.2f}  '
      f'{result["sacrebleu_signature"]}',
      f'BLEU (tokenized, compound-split, cased) {result["bleu_tokenized"]:.2f}  (the paper\'s)',
      f'BLEU (tokenized, lowercased)            {result["bleu_tokenized_lowercase"]:.2f}',
      f'perplexity per token                   {result["perplexity"]:.3f}  '
      f'({result["perplexity_pairs"]} pairs; {result["perplexity_pairs_too_long"]} too long)',
      f'decoding                               {result["decode_seconds"]:.1f} s, '
      f'{result["sentences_per_second"]:.1f} sentences/s (compilation included)',
      f'translations                           {result["hypotheses"]}',
  ])


def main(argv):
  config_lib.start_command(argv)
  try:
    result = evaluate(translate.translator_from_flags(), translate.WORKDIR.value, _SPLIT.value)
  except (OSError, ValueError, RuntimeError) as e:
    sys.exit(f'error: {e}')
  if jax.process_index() == 0:
    print(json.dumps(result) if _JSON.value else _report(result), flush=True)


if __name__ == '__main__':
  app.run(main)
