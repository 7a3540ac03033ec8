r"""How the data side's time and memory grow, from Multi30k's 29000 pairs to WMT14's 4.5 million.

  python experiments/data_scale/data_scale.py --scratch=/tmp/data_scale \
      [--sizes=29000,300000,1000000,4500000] [--output=experiments/data_scale/data_scale.json]

For each size it generates a parallel English-German corpus under --scratch (never committed:
`generate`), then inspects `configs/base.py` (the paper's vocabulary of 37000 tokens, pairs up
to 256 tokens, batches of 25000 tokens) on it as `data.dataset='files'`, twice, each time in a
fresh process:
  1. `python -m transformer_jax.data --inspect --json` on an empty workdir and TFDS directory:
     preparing the dataset (reading the text files into array_record), learning the vocabulary,
     encoding the splits; then the iterator's tokens/s over the first --batches batches, timed
     from the epoch's plan in hand (the plan's own seconds apart);
  2. the same command on the same workdir: what a resumed run loads (the prepared dataset, the
     vocabulary and the encoded splits), and its first batch, restored halfway through an epoch.
Each row records the command's wall time, its peak resident memory (`os.wait4`) and its JSON.
Rows are written to --output as they finish; a size already there is not run again. Then a plot
(data_scale.png beside the results) shows each stage's seconds and the peak memory
against the pairs, on log-log axes with a line of slope 1 (linear growth) for comparison.
"""

import json
import os
import shutil
import subprocess
import sys
import time

from absl import app, flags
import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.data import builtin_grammar, datasets
from transformer_jax.storage import provenance

checkout = loading.import_sibling(__file__, '../tools/checkout')

MULTI30K = os.path.join(os.path.dirname(checkout.ROOT), 'shared', 'data', 'multi30k')

_SCRATCH = flags.DEFINE_string('scratch', None, 'Where corpora, workdirs and datasets go.')
_SIZES = flags.DEFINE_list('sizes', ['29000', '300000', '1000000', '4500000'],
                           'Training pairs of each corpus.')
_OUTPUT = flags.DEFINE_string('output', os.path.join(checkout.ROOT, 'experiments', 'data_scale',
                                                     'data_scale.json'), 'Rows, as JSON.')
cli.renamed('results', 'output', 'the file the rows are written to')
_BATCHES = flags.DEFINE_integer('batches', 300, 'Batches over which tokens/s is measured.')
_HELD_OUT = 3000  # validation and test pairs, as newstest2013 and newstest2014

# A sentence joins k source sentences, k geometric with mean 2 (Multi30k's descriptions are
# short; news sentences average about twice their length, with a long tail). One pair in
# three gets a rare made-up word (a name), the same on both sides, from a Zipfian lexicon of
# _RARE_WORDS: WMT's long tail of word types, which the vocabulary must learn around.
_JOIN_P = 0.5
_RARE_WORDS = 200_000


def _base_pairs() -> list[tuple[str, str]]:
  multi30k = datasets.read_parallel(os.path.join(MULTI30K, 'train.en.gz'),
                                    os.path.join(MULTI30K, 'train.de.gz'))[0]
  return multi30k + builtin_grammar.splits(seed=0)['train']


def _lexicon(rng: np.random.Generator) -> list[str]:
  syllables = [c + v for c in 'bdfghklmnprstvwz' for v in ('a', 'e', 'i', 'o', 'u', 'ei', 'au')]
  parts = rng.integers(0, len(syllables), size=(_RARE_WORDS, 4))
  sizes = rng.integers(2, 5, size=_RARE_WORDS)
  return [''.join(syllables[p] for p in row[:size]).capitalize()
          for row, size in zip(parts, sizes)]


def generate(path_pattern: str, pairs: int, seed: int, base: list[tuple[str, str]]) -> None:
  """Writes `pairs` generated pairs to path_pattern.format(lang='en') and (lang='de')."""
  rng = np.random.default_rng(seed)
  lexicon = _lexicon(np.random.default_rng(0))
  joins = rng.geometric(_JOIN_P, size=pairs)
  members = rng.integers(0, len(base), size=int(joins.sum()))
  rare = np.where(rng.random(pairs) < 1 / 3,
                  np.minimum(rng.zipf(1.3, size=pairs), _RARE_WORDS) - 1, -1)
  with open(path_pattern.format(lang='en'), 'w', encoding='utf-8') as en, \
      open(path_pattern.format(lang='de'), 'w', encoding='utf-8') as de:
    start = 0
    for k, word in zip(joins.tolist(), rare.tolist()):
      chosen = [base[i] for i in members[start:start + k]]
      start += k
      source, target = ' '.join(s for s, _ in chosen), ' '.join(t for _, t in chosen)
      if word >= 0:
        source, target = f'{lexicon[word]} {source}', f'{target} {lexicon[word]}'
      en.write(source + '\n')
      de.write(target + '\n')


def _run(command: list[str]) -> tuple[dict, float, int]:
  """(the command's JSON, its wall seconds, its peak resident bytes)."""
  start = time.perf_counter()
  process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             cwd=checkout.ROOT)
  out = process.stdout.read()
  _, status, usage = os.wait4(process.pid, 0)
  seconds = time.perf_counter() - start
  if status:
    raise RuntimeError(f'{" ".join(command)} failed ({status})')
  return json.loads(out.decode().strip().splitlines()[-1]), seconds, usage.ru_maxrss * 1024


def _measure(size: int, scratch: str, base: list[tuple[str, str]]) -> dict:
  corpus = os.path.join(scratch, f'corpus{size}')
  os.makedirs(corpus, exist_ok=True)
  start = time.perf_counter()
  for split, pairs, seed in (('train', size, 1), ('valid', _HELD_OUT, 2), ('test', _HELD_OUT, 3)):
    generate(os.path.join(corpus, f'{split}.{{lang}}'), pairs, seed, base)
  generated = time.perf_counter() - start
  workdir, tfds_dir = os.path.join(scratch, f'workdir{size}'), os.path.join(scratch, f'tfds{size}')
  for directory in (workdir, tfds_dir):
    shutil.rmtree(directory, ignore_errors=True)
  command = [sys.executable, '-m', 'transformer_jax.data', '--config=configs/base.py',
             '--inspect', '--json', f'--batches={_BATCHES.value}', f'--workdir={workdir}',
             '--config.data.dataset=files', f'--config.data.tfds_data_dir={tfds_dir}',
             f'--config.data.train_files={corpus}/train.{{lang}}',
             f'--config.data.validation_files={corpus}/valid.{{lang}}',
             f'--config.data.test_files={corpus}/test.{{lang}}']
  row = {'pairs': size, 'generate_seconds': generated,
         'corpus_bytes': sum(os.path.getsize(os.path.join(corpus, f)) for f in os.listdir(corpus))}
  for run in ('first', 'resumed'):
    stats, seconds, peak = _run(command)
    row[run] = {'wall_seconds': seconds, 'peak_memory_bytes': peak, **stats}
    print(f'{size} pairs, {run} run: {seconds:.1f} s, {peak / 2**30:.2f} GiB, '
          f'{stats["load_seconds"]}, {stats["pipeline_tokens_per_second"]:,.0f} tokens/s, '
          f'an epoch planned in {stats["plan_seconds"]:.2f} s, '
          f'first batch {stats["first_batch_seconds"]:.2f} s', flush=True)
  row['command'] = ' '.join(command[1:])
  return row


def plot(rows: list[dict], path: str) -> None:
  """Seconds of each stage of a first run, and peak memory of both runs, against pairs."""
  pairs = np.array([row['pairs'] for row in rows])
  figure, (time_axes, memory_axes) = plt.subplots(1, 2, figsize=(10, 4))
  for stage in ('prepare', 'vocabulary', 'encode'):
    time_axes.plot(pairs, [row['first']['load_seconds'][stage] for row in rows], 'o-',
                   label=stage)
  time_axes.plot(pairs, [row['first']['wall_seconds'] for row in rows], 'ko-',
                 label='first run, whole command')
  time_axes.plot(pairs, [row['resumed']['wall_seconds'] for row in rows], 'ks--',
                 label='resumed run, whole command')
  linear = rows[-1]['first']['wall_seconds'] * pairs / pairs[-1]
  time_axes.plot(pairs, linear, ':', color='gray', label='linear in pairs')
  time_axes.set(xscale='log', yscale='log', xlabel='training pairs', ylabel='seconds',
                title='Preparing a corpus (2 CPU cores)')
  time_axes.legend(fontsize=8)
  for run, style in (('first', 'o-'), ('resumed', 's--')):
    memory_axes.plot(pairs, [row[run]['peak_memory_bytes'] / 2**30 for row in rows], style,
                     label=f'{run} run')
  memory_axes.set(xscale='log', xlabel='training pairs', ylabel='GiB',
                  title='Peak resident memory', ylim=(0, None))
  memory_axes.legend(fontsize=8)
  figure.tight_layout()
  figure.savefig(path, dpi=100)


def main(argv):
  del argv
  rows = []
  if os.path.exists(_OUTPUT.value):
    with open(_OUTPUT.value) as f:
      rows = json.load(f)['rows']
  base, origin = _base_pairs(), provenance.record()
  for size in map(int, _SIZES.value):
    if any(row['pairs'] == size for row in rows):
      continue
    rows.append(_measure(size, _SCRATCH.value, base))
    rows.sort(key=lambda row: row['pairs'])
    with open(_OUTPUT.value, 'w') as f:
      json.dump({'provenance': origin, 'rows': rows}, f, indent=1)
  plot(rows, os.path.splitext(_OUTPUT.value)[0] + '.png')


if __name__ == '__main__':
  flags.mark_flag_as_required('scratch')
  app.run(main)
