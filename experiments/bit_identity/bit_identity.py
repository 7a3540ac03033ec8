r"""Fixed-seed tiny runs whose every bit a refactoring must keep: run it in the checkout before
and in the checkout after, then compare the two files.

  python experiments/bit_identity/bit_identity.py --output=before.json     # in the checkout before
  python experiments/bit_identity/bit_identity.py --output=after.json      # in the checkout after
  python experiments/bit_identity/bit_identity.py --compare before.json after.json

Three runs of `configs/tiny.py` on the built-in corpus, each a fresh workdir, 12 steps: one run
alone (batches of several shapes, one step a call); two runs trained together
(`runs_together.train_together`, seeds 0 and 1, ε_ls 0.1 and 0.2); one run with packed sequences,
two micro-batches a step and four steps a call. For each run the file holds a SHA-256 of every leaf
of the final checkpoint's train state (parameters, Adam's moments, step, dropout key), read with
orbax alone (so the digest does not depend on the package's layout), and the dev split's loss, nll
and accuracy at step 12, and the logged training loss, nll, accuracy, gradient norm and learning
rate (`train.log_every_steps` 1: each record is one step's, but in the packed run one call's four).
Those are reports derived from the state's steps, compared as well: a change in how several steps
are summarised shows there only.
"""

import hashlib
import json
import os
import sys
import tempfile

from absl import app, flags
import numpy as np
import orbax.checkpoint as ocp

from transformer_jax import cli
from transformer_jax.config import checks, loading
from transformer_jax.loop import runs_together, train_loop
from transformer_jax.storage import provenance

checkout = loading.import_sibling(__file__, '../tools/checkout')

_OUTPUT = flags.DEFINE_string('output', None, 'Write the digests to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')
_COMPARE = flags.DEFINE_bool('compare', False, 'Compare the two JSON files given as arguments.')

_STEPS = 12


def _config(tfds_dir: str, **fields):
  config = loading.from_file(os.path.join(checkout.ROOT, 'configs', 'tiny.py'))
  config.update_from_flattened_dict({
      'data.tfds_data_dir': tfds_dir, 'train.num_train_steps': _STEPS,
      'train.log_every_steps': 1, 'train.eval_every_steps': _STEPS, 'train.num_eval_steps': 1,
      'train.eval_bleu': False, 'train.checkpoint_every_steps': _STEPS, **fields})
  checks.validate(config)
  return config


def _digest(workdir: str) -> dict[str, str]:
  """SHA-256 of each leaf of `workdir`'s checkpoint at step 12, by its path in the tree (its
  whole train state: one `state` item, or `params` and `optimizer` since issue 107)."""
  checkpoint = os.path.join(workdir, 'checkpoints', str(_STEPS))
  with ocp.PyTreeCheckpointer() as checkpointer:
    if os.path.isdir(os.path.join(checkpoint, 'state')):
      state = checkpointer.restore(os.path.join(checkpoint, 'state'))
    else:
      optimizer = checkpointer.restore(os.path.join(checkpoint, 'optimizer'))
      state = {**{name: value for name, value in optimizer.items() if value is not None},
               'params': checkpointer.restore(os.path.join(checkpoint, 'params'))}
  leaves = {}
  for path, leaf in sorted(_flatten(state, ''), key=lambda item: item[0]):
    array = np.asarray(leaf)
    leaves[path] = hashlib.sha256(array.tobytes() + str(array.dtype).encode()).hexdigest()
  return leaves


def _train_records(workdir: str) -> list[dict]:
  """Each step's 'train' record of `workdir`'s metrics.jsonl, without its times."""
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    records = [json.loads(line) for line in f]
  return [{name: record[name] for name in
           ('step', 'loss', 'nll', 'accuracy', 'grad_norm', 'learning_rate')}
          for record in records if record['split'] == 'train']


def _flatten(tree, prefix: str):
  if isinstance(tree, dict):
    for key, value in tree.items():
      yield from _flatten(value, f'{prefix}/{key}')
  elif isinstance(tree, (list, tuple)):
    for i, value in enumerate(tree):
      yield from _flatten(value, f'{prefix}/{i}')
  else:
    yield prefix, tree


def _runs(scratch: str) -> dict:
  tfds_dir = os.path.join(scratch, 'tfds')
  results = {}
  alone = os.path.join(scratch, 'alone')
  results['alone'] = {'dev': train_loop.train_and_evaluate(_config(tfds_dir), alone),
                      'state': _digest(alone), 'train': _train_records(alone)}
  dirs = [os.path.join(scratch, f'together{i}') for i in range(2)]
  dev = runs_together.train_together(
      [_config(tfds_dir, seed=i, **{'train.label_smoothing': 0.1 * (i + 1)}) for i in range(2)],
      dirs)
  for i, workdir in enumerate(dirs):
    results[f'together{i}'] = {'dev': dev[i], 'state': _digest(workdir),
                               'train': _train_records(workdir)}
  packed = os.path.join(scratch, 'packed')
  results['packed'] = {
      'dev': train_loop.train_and_evaluate(_config(tfds_dir, **{
          'data.pack_length': 64, 'train.grad_accum_steps': 2, 'train.steps_per_call': 4}),
          packed),
      'state': _digest(packed), 'train': _train_records(packed)}
  for result in results.values():  # times, not results
    result['dev'] = {name: value for name, value in result['dev'].items()
                     if name in ('loss', 'nll', 'accuracy')}
  return results


def _compare(before_file: str, after_file: str) -> int:
  with open(before_file) as f:
    before = json.load(f)['runs']
  with open(after_file) as f:
    after = json.load(f)['runs']
  differences = 0
  for run in sorted(set(before) | set(after)):
    a, b = before.get(run, {}), after.get(run, {})
    if a.get('train') != b.get('train'):
      print(f'{run}: the logged training figures differ')
      differences += 1
    if a.get('dev') != b.get('dev'):
      print(f'{run}: dev metrics differ: {a.get("dev")} against {b.get("dev")}')
      differences += 1
    changed = [leaf for leaf in sorted(set(a.get('state', {})) | set(b.get('state', {})))
               if a['state'].get(leaf) != b['state'].get(leaf)]
    if changed:
      print(f'{run}: {len(changed)} state leaves differ, the first {changed[0]}')
      differences += 1
    else:
      print(f'{run}: {len(a["state"])} state leaves bit-identical')
  return 1 if differences else 0


def main(argv):
  if _COMPARE.value:
    sys.exit(_compare(*argv[1:]))
  with tempfile.TemporaryDirectory() as scratch:
    results = {'provenance': provenance.record(), 'runs': _runs(scratch)}
  text = json.dumps(results, indent=1)
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w') as f:
      f.write(text + '\n')
  print(text)


if __name__ == '__main__':
  app.run(main)
