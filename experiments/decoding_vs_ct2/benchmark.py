r"""Our decoding against CTranslate2's on a CPU, made fair: the same model, inputs, batches, beam
and length cap, each side pinned to the same cores, tokenization outside both timers.

  python experiments/decoding_vs_ct2/benchmark.py --workdir=DIR [--split=test] \
      [--beam_sizes=1,4] [--threads=1,2] [--rounds=3] [--batch_size=64] \
      [--output=experiments/decoding_vs_ct2/<cpu>.json]

The workdir's averaged checkpoints are exported (`transformer_jax.export`) and converted to
CTranslate2 (`ct2-transformers-converter`'s converter, float32). The split's sources are
encoded once, by our tokenizer, outside any timer; CTranslate2 gets the same ids as the
export's tokens, so both sides decode exactly the same inputs. The batches are `translate`'s
(its length buckets, `batch_size` sentences at a time, a batch's output capped at its bucket
plus `config.decode.max_extra_length`); CTranslate2 gets each batch as one `translate_batch`
call with that cap and the exported length penalty β (its model keeps none).

Each side runs in a process of its own, started under `taskset` on the first N cores (N of
`--threads`), CTranslate2 with `intra_threads=N`. Each process decodes the split once untimed
(our compiling; CTranslate2's first calls), then the parent asks the sides in turn, `--rounds`
times, for a timed pass over the split: output ids in, output ids out, nothing else timed.
Reported: each side's best pass (sentences/s and output tokens/s, EOS not counted), every pass,
and how the translations compare: identical ones, and for beam search the output lengths
(CTranslate2's length penalty has another form: lp = |Y|^β, ours §6.1's ((5 + |Y|) / 6)^α).
And the work: the row-steps our searches compute over the split (a decoder step of r rows
counts r; counted by a translator of its own, untimed), against the fewest any search of each
side's outputs computes, a row a hypothesis at every step up to its output's end (EOS
included; CTranslate2 drops each sentence as it ends, and stops beam search once the best
hypothesis has ended, where §6.1's early termination waits for a bound); and the row-steps our
searches compute with each sentence searched alone, untimed: the fewest our own stop rule
needs, a sentence dropped the step it is done (for beam search, §6.1's bound).
"""

import dataclasses
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

from absl import flags
import jax
import numpy as np

from transformer_jax import cli, export
from transformer_jax.data import datasets
from transformer_jax.decoding import batch_decode
from transformer_jax.decoding.translator import Translator, decode_batches
from transformer_jax.storage import atomic, provenance

_WORKDIR = flags.DEFINE_string('workdir', None, 'A trained workdir.', required=True)
_SPLIT = flags.DEFINE_string('split', 'test', 'Which split to translate.')
_BEAM_SIZES = flags.DEFINE_list('beam_sizes', ['1', '4'], 'Beam sizes to measure.')
_THREADS = flags.DEFINE_list('threads', ['1', '2'], 'Cores each side is pinned to, each count '
                             'measured apart.')
_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Timed passes of each side, interleaved.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 64, 'Sentences per batch.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
_SIDE = flags.DEFINE_enum('side', None, ['ours', 'ct2'], 'Internal: run one side, reading '
                          'its inputs from --inputs and a line per pass on stdin.')
_INPUTS = flags.DEFINE_string('inputs', None, 'Internal: the pickled inputs of --side.')
_CODE = flags.DEFINE_string('code', 'this tree', 'What our code is, for the file (a checkout run '
                            'with PYTHONPATH=CHECKOUT: \'before the levers\').')


def _row_steps(inputs: dict, sources: list) -> int:
  """The rows that the decoder steps of our searches compute over `sources`, counted by a
  callback in the programs of a translator of its own (so untimed)."""
  counted, scorer = [], batch_decode.model_scorer

  def counting(*args, **kwargs):
    made = scorer(*args, **kwargs)

    def step(state, tokens, i):
      jax.debug.callback(lambda rows=tokens.shape[0]: counted.append(rows))
      return made.step(state, tokens, i)

    return dataclasses.replace(made, step=step)

  batch_decode.model_scorer = counting
  try:
    Translator(inputs['workdir'], beam_size=inputs['beam_size'],
               batch_size=inputs['batch_size']).translate_ids(sources)
    jax.effects_barrier()
  finally:
    batch_decode.model_scorer = scorer
  return sum(counted)


def _ours(inputs: dict, threads: int):
  """The passes of our side: `translate_ids` of the encoded sources, timed alone; and the
  row-steps they compute."""
  del threads  # the cores `taskset` gives the process
  sources = [np.asarray(s, np.int32) for s in inputs['sources']]
  work = {'row_steps': _row_steps(inputs, sources),
          'row_steps_alone': _row_steps(dict(inputs, batch_size=1), sources)}
  translator = Translator(inputs['workdir'], beam_size=inputs['beam_size'],
                          batch_size=inputs['batch_size'])
  translator.translate_ids(sources)  # compiles every bucket's program

  def timed():
    start = time.perf_counter()
    outputs = translator.translate_ids(sources)
    return time.perf_counter() - start, outputs

  return timed, work


def _ct2(inputs: dict, threads: int):
  """The passes of CTranslate2: one `translate_batch` a batch, the tokens given."""
  import ctranslate2  # pylint: disable=import-outside-toplevel
  model = ctranslate2.Translator(inputs['ct2_dir'], device='cpu', compute_type='float32',
                                 intra_threads=threads, inter_threads=1)
  tokens, to_ours = inputs['tokens'], inputs['to_ours']

  def translate():
    results = [None] * len(tokens)
    for cap, members in inputs['batches']:
      batch = model.translate_batch([tokens[i] for i in members], beam_size=inputs['beam_size'],
                                    max_decoding_length=cap, max_batch_size=len(members),
                                    length_penalty=inputs['beta'])
      for i, result in zip(members, batch):
        results[i] = result.hypotheses[0]
    return results

  translate()  # untimed, as our first pass

  def timed():
    start = time.perf_counter()
    results = translate()
    seconds = time.perf_counter() - start
    return seconds, [[to_ours[token] for token in hypothesis] if hypothesis is not None else []
                     for hypothesis in results]

  return timed, {}


def _side() -> None:
  """A side's process: prints 'ready' and a JSON object of what it counted, then a JSON line
  per line read from stdin."""
  with open(_INPUTS.value, 'rb') as f:
    inputs = pickle.load(f)
  threads = len(os.sched_getaffinity(0))
  timed, counted = (_ours if _SIDE.value == 'ours' else _ct2)(inputs, threads)
  print('ready', json.dumps(counted), flush=True)
  for _ in sys.stdin:
    seconds, outputs = timed()
    print(json.dumps({'seconds': seconds, 'outputs': [list(map(int, o)) for o in outputs]}),
          flush=True)


def _start(side: str, inputs_path: str, threads: int) -> tuple[subprocess.Popen, dict]:
  cores = ','.join(map(str, sorted(os.sched_getaffinity(0))[:threads]))
  process = subprocess.Popen(
      ['taskset', '-c', cores, sys.executable, __file__, f'--side={side}',
       f'--inputs={inputs_path}', f'--workdir={_WORKDIR.value}'],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
  for line in process.stdout:
    if line.startswith('ready '):
      return process, json.loads(line[len('ready '):])
  raise RuntimeError(f'the {side} side ended before it was ready')


def _pass(process: subprocess.Popen) -> dict:
  process.stdin.write('run\n')
  process.stdin.flush()
  return json.loads(process.stdout.readline())


def _fewest_row_steps(outputs: list, batches: list, beam_size: int) -> int:
  """The row-steps a search that drops each sentence as it ends computes for `outputs`: a row a
  hypothesis at every step up to the output's end (its EOS, or the batch's cap)."""
  return sum(beam_size * min(len(outputs[i]) + 1, cap) for cap, members in batches
             for i in members)


def _compare(ours: list, theirs: list, beam_size: int) -> dict:
  same = sum(a == b for a, b in zip(ours, theirs))
  result = {'same_translations': same, 'sentences': len(ours)}
  if beam_size > 1:
    result['same_length'] = sum(len(a) == len(b) for a, b in zip(ours, theirs))
    result['output_tokens'] = {'ours': sum(map(len, ours)), 'ct2': sum(map(len, theirs))}
  return result


def _measure(inputs: dict, directory: str, threads: int) -> dict:
  path = os.path.join(directory, f'inputs_{inputs["beam_size"]}.pickle')
  with open(path, 'wb') as f:
    pickle.dump(inputs, f)
  started = {side: _start(side, path, threads) for side in ('ours', 'ct2')}
  sides = {side: process for side, (process, _) in started.items()}
  passes, outputs = {side: [] for side in sides}, {}
  try:
    for _ in range(_ROUNDS.value):
      for side, process in sides.items():
        result = _pass(process)
        passes[side].append(result['seconds'])
        outputs.setdefault(side, result['outputs'])
  finally:
    for process in sides.values():
      process.stdin.close()
      process.wait()
  sentences = len(inputs['sources'])
  figures = {}
  for side in sides:
    best = min(passes[side])
    tokens = sum(map(len, outputs[side]))
    figures[side] = {'seconds': passes[side], 'best_seconds': best,
                     'sentences_per_second': sentences / best,
                     'output_tokens_per_second': tokens / best,
                     'fewest_row_steps': _fewest_row_steps(outputs[side], inputs['batches'],
                                                           inputs['beam_size']),
                     **started[side][1]}
  figures['ours_over_ct2'] = (figures['ours']['sentences_per_second']
                              / figures['ct2']['sentences_per_second'])
  figures['translations'] = _compare(outputs['ours'], outputs['ct2'], inputs['beam_size'])
  return figures


def main():
  if _SIDE.value:
    _side()
    return
  import ctranslate2  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from transformer_jax.model import marian  # pylint: disable=import-outside-toplevel
  translator = Translator(_WORKDIR.value, batch_size=_BATCH_SIZE.value)
  texts = [source for source, _ in datasets.load_pairs(translator.config.data, _SPLIT.value)]
  sources = [s.tolist() for s in translator.encode(texts, f'{_SPLIT.value} source')]
  cap = translator.config.decode.max_extra_length
  batches = [(length + cap, members) for length, members in decode_batches(
      translator.lengths, np.array([len(s) for s in sources]), translator.batch_sentences)]
  figures = {'code': _CODE.value, 'workdir': _WORKDIR.value, 'split': _SPLIT.value,
             'sentences': len(texts),
             'batch_size': _BATCH_SIZE.value, 'rounds': _ROUNDS.value,
             'alpha': translator.config.decode.alpha, 'ctranslate2': ctranslate2.__version__,
             'provenance': provenance.record(), 'results': []}
  with tempfile.TemporaryDirectory() as directory:
    exported = os.path.join(directory, 'hf')
    figures['checkpoint_steps'] = export.export(_WORKDIR.value, exported)
    ct2_dir = os.path.join(directory, 'ct2')
    ctranslate2.converters.TransformersConverter(exported).convert(ct2_dir)
    tokenizer = transformers.MarianTokenizer.from_pretrained(exported)
    vocab = translator.config.data.vocab_size
    our_ids = marian.our_ids(vocab)
    tokens = [tokenizer.convert_ids_to_tokens(marian.marian_id(np.asarray(s), vocab).tolist())
              for s in sources]
    to_ours = {token: int(our_ids[i]) for token, i in tokenizer.get_vocab().items()}
    figures['beta'] = transformers.GenerationConfig.from_pretrained(exported).length_penalty
    for beam_size in map(int, _BEAM_SIZES.value):
      for threads in map(int, _THREADS.value):
        inputs = {'workdir': _WORKDIR.value, 'beam_size': beam_size,
                  'batch_size': _BATCH_SIZE.value, 'sources': sources, 'batches': batches,
                  'ct2_dir': ct2_dir, 'tokens': tokens, 'to_ours': to_ours,
                  'beta': figures['beta']}
        result = {'beam_size': beam_size, 'threads': threads,
                  **_measure(inputs, directory, threads)}
        figures['results'].append(result)
        print(f'beam {beam_size}, {threads} thread(s): ours '
              f'{result["ours"]["sentences_per_second"]:.1f} sentences/s, CTranslate2 '
              f'{result["ct2"]["sentences_per_second"]:.1f}: {result["ours_over_ct2"]:.2f}x; '
              f'same translations {result["translations"]["same_translations"]}/{len(texts)}',
              flush=True)
  if _OUTPUT.value:
    atomic.write(_OUTPUT.value, json.dumps(figures, indent=1) + '\n')


if __name__ == '__main__':
  cli.run(main)
