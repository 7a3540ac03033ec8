r"""Decoding speed with and without the key/value cache, on a whole split.

  python experiments/decoding/decode_speed.py --workdir=DIR [--split=test] [--beam_size=4] \
      [--batch_size=64] [--output=experiments/decoding/cpu.json] \
      [--nouncached] [--output_ids=FILE]

Translates every source sentence of the split with the workdir's latest checkpoint, once with
the incremental (cached) decoder and once re-running the decoder over the whole output at every
step (uncached; --nouncached skips it). Every bucket shape is compiled first (one batch each, not
timed); then the whole split is timed. Reports sentences/s and output tokens/s (EOS included)
for both, and checks that both produce the same translations. --output_ids saves the cached
decoder's output ids (JSON), to compare two versions of the code.
"""

import json
import sys
import time

from absl import app, flags, logging
import jax
import numpy as np

from transformer_jax import cli
from transformer_jax.data import datasets
from transformer_jax.decoding.translator import Translator
from transformer_jax.storage import provenance

_WORKDIR = flags.DEFINE_string('workdir', None, 'A trained workdir.', required=True)
_SPLIT = flags.DEFINE_string('split', 'test', 'Which split to translate.')
_BEAM_SIZE = flags.DEFINE_integer('beam_size', 4, 'Beam size.')
_ALPHA = flags.DEFINE_float('alpha', 0.6, 'Length penalty.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 64, 'Sentences per batch.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')
_UNCACHED = flags.DEFINE_bool('uncached', True, 'Also time the uncached decoder.')
_OUTPUT_IDS = flags.DEFINE_string('output_ids', None, 'Save the output ids (JSON) to this file.')
cli.renamed('outputs', 'output_ids', 'the file the output ids are written to')


def _time_split(translator: Translator, sources: list[np.ndarray]) -> tuple:
  lengths = translator.lengths
  buckets = np.searchsorted(lengths, [len(s) for s in sources])
  warm_up = [sources[np.flatnonzero(buckets == b)[0]] for b in sorted(set(buckets.tolist()))]
  translator.translate_ids(warm_up)  # compiles each bucket's shape
  start = time.perf_counter()
  outputs = translator.translate_ids(sources)
  return time.perf_counter() - start, outputs


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  figures = {'split': _SPLIT.value, 'beam_size': _BEAM_SIZE.value, 'alpha': _ALPHA.value,
             'batch_size': _BATCH_SIZE.value,
             'provenance': provenance.record(jax.devices()[0].device_kind)}
  results = {}
  for cached in (True, False) if _UNCACHED.value else (True,):
    translator = Translator(_WORKDIR.value, beam_size=_BEAM_SIZE.value,
                                      alpha=_ALPHA.value, average_last=1,
                                      batch_size=_BATCH_SIZE.value, cached=cached)
    pairs = datasets.load_pairs(translator.config.data, _SPLIT.value)
    sources = translator.encode([source for source, _ in pairs])
    seconds, outputs = _time_split(translator, sources)
    tokens = sum(len(ids) + 1 for ids in outputs)
    name = 'cached' if cached else 'uncached'
    results[name] = outputs
    figures[name] = {'seconds': seconds, 'sentences_per_second': len(sources) / seconds,
                     'output_tokens_per_second': tokens / seconds}
    print(f'{name:>8}: {len(sources)} sentences in {seconds:.1f} s, '
          f'{len(sources) / seconds:.1f} sentences/s, {tokens / seconds:.0f} output tokens/s',
          flush=True)
  figures['sentences'] = len(sources)
  figures['mean_output_tokens'] = float(np.mean([len(ids) + 1 for ids in results['cached']]))
  print(f'mean output length {figures["mean_output_tokens"]:.1f} tokens')
  if _UNCACHED.value:
    figures['speedup'] = figures['uncached']['seconds'] / figures['cached']['seconds']
    figures['same_translations'] = results['cached'] == results['uncached']
    print(f'cache speed-up {figures["speedup"]:.2f}x; same translations: '
          f'{figures["same_translations"]}')
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w') as f:
      json.dump(figures, f, indent=2)
  if _OUTPUT_IDS.value:
    with open(_OUTPUT_IDS.value, 'w') as f:
      json.dump(results['cached'], f)
  if not figures.get('same_translations', True):
    sys.exit('cached and uncached decoding disagree')


if __name__ == '__main__':
  app.run(main)
