"""experiments/colab_tpu.ipynb runs top to bottom: its cells are executed on CPU (8 fake
devices) with a tiny model on the built-in corpus, once to train and evaluate and once more
after a "disconnect" to check that it resumes."""

import ast
import json
import os

import nbclient
import nbformat
import pytest

from conftest import SMALL, xla_flags
from test_sweep import _sweep_file

# End-to-end: trains models and runs commands (`pytest -m "not slow"` leaves them out).
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, 'experiments', 'colab_tpu.ipynb')


def _parameters(storage: str, steps: int, table3: str | None = None) -> dict:
  return {
      'TABLE3_SWEEP': table3, 'TABLE3_TOGETHER': 1,
      'REPO_DIR': ROOT, 'CLONE': False, 'INSTALL': False, 'MOUNT_DRIVE': False,
      'STORAGE': storage, 'CONFIG': 'configs/base.py', 'RUN_NAME': 'tiny',
      'EXPECTED_PLATFORM': 'cpu', 'EXPECTED_DEVICES': 8, 'EVAL_SPLIT': 'test',
      'OVERRIDES': {**SMALL, 'train.num_train_steps': steps,
                    'train.log_every_steps': 10, 'train.eval_every_steps': 10,
                    'train.checkpoint_every_steps': 10, 'train.eval_bleu': False,
                    'decode.beam_size': 2, 'decode.average_last': 2,
                    'decode.max_extra_length': 8},
  }


def _parameters_cell(notebook) -> int:
  tagged = [i for i, cell in enumerate(notebook.cells)
            if 'parameters' in cell.metadata.get('tags', [])]
  assert len(tagged) == 1, 'the notebook needs exactly one cell tagged "parameters"'
  return tagged[0]


def _run(parameters: dict, cwd: str) -> str:
  """Executes the notebook in `cwd` with its parameters cell replaced; returns all text
  output."""
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  index = _parameters_cell(notebook)
  notebook.cells[index].source = '\n'.join(f'{name} = {value!r}'
                                           for name, value in parameters.items())
  nbclient.NotebookClient(notebook, timeout=600, kernel_name='python3',
                          resources={'metadata': {'path': cwd}}).execute()
  texts = []
  for cell in notebook.cells:
    for output in cell.get('outputs', []):
      texts.append(output.get('text', '') or output.get('data', {}).get('text/plain', ''))
  return '\n'.join(texts)


def test_parameters_cell_names_what_the_test_replaces():
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  tree = ast.parse(notebook.cells[_parameters_cell(notebook)].source)
  names = {target.id for node in tree.body if isinstance(node, ast.Assign)
           for target in ast.walk(node.targets[0]) if isinstance(target, ast.Name)}
  # The test sets every parameter the notebook has, and no name the notebook lacks.
  assert set(_parameters('/tmp', 1)) == names - {'REPO_URL'}


def test_notebook_trains_evaluates_and_resumes(tmp_path, monkeypatch):
  monkeypatch.setenv('XLA_FLAGS', xla_flags(8))
  monkeypatch.setenv('JAX_PLATFORMS', 'cpu')
  workdir = tmp_path / 'tiny'

  # Run outside the repository: the notebook needs only the installed package. Its miniature
  # Table 3: a tiny sweep of two rows, side by side on two of the 8 cores.
  sweep = _sweep_file(tmp_path, {'small': {}, 'seed1': {'seed': 1}})
  first = _run(_parameters(str(tmp_path), steps=20, table3=sweep), str(tmp_path))
  assert '8 devices' in first
  assert sorted(os.listdir(workdir / 'checkpoints')) == ['10', '20']
  [result_path] = (workdir / 'eval').glob('test-step20-avg2-beam2-*.json')
  result = json.loads(result_path.read_text())
  # The whole test split was translated, one line per source sentence.
  hypotheses = (workdir / 'eval' / result_path.name.replace('.json', '.txt')).read_text()
  assert len(hypotheses.splitlines()) == result['sentences'] == 40  # the session corpus's
  assert result['checkpoint_steps'] == [10, 20]
  assert f'{result["bleu_tokenized"]:.2f}' in first  # the report was printed
  table3 = tmp_path / 'table3'
  devices = set()
  for row in ('small', 'seed1'):
    row_result = json.loads((table3 / 'rows' / f'{row}.json').read_text())
    assert row_result['provenance']['machine']['devices'] == 1
    devices.add(first.split(f'{row}: training in ')[1].splitlines()[0])
  assert devices == {f'{table3}/small on device 0', f'{table3}/seed1 on device 1'}
  assert '| small |' in first and '| seed1 |' in first  # the table printed

  # Colab disconnected; "Run all" again with a longer budget continues from step 20.
  second = _run(_parameters(str(tmp_path), steps=30, table3=sweep), str(tmp_path))
  assert second.count('done already') == 2
  assert 'Resumed from step 20' in second
  assert sorted(os.listdir(workdir / 'checkpoints'), key=int)[-1] == '30'
  assert list((workdir / 'eval').glob('test-step30-avg2-beam2-*.json'))
