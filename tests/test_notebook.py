"""experiments/colab_tpu.ipynb: the JAX build it installs for a TPU, a GPU and the CPU; the
micro-batches it splits a step into on 1, 4 and 8 cores; and its cells executed top to bottom on
CPU with a tiny model on the built-in corpus: on 8 devices to train and evaluate, then after a
"disconnect" on a runtime of 1 device, where it resumes."""

import ast
import importlib.metadata
import json
import os

import nbclient
import nbformat
import pytest

from conftest import SMALL, xla_flags
from test_sweep import _sweep_file
from transformer_jax.config import checks, loading
from transformer_jax.data import batching

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, 'experiments', 'colab_tpu.ipynb')
TINY_TOKENS_PER_DEVICE = 128  # SMALL's 512-token batch: 4 micro-batches on 1 device, 1 on 8


def _parameters(storage: str, steps: int, table3: str | None = None) -> dict:
  return {
      'TABLE3_SWEEP': table3, 'TABLE3_TOGETHER': 1,
      'REPO_DIR': ROOT, 'CLONE': False, 'INSTALL': False, 'PLATFORM': 'cpu',
      'MOUNT_DRIVE': False, 'STORAGE': storage, 'CONFIG': 'configs/base.py', 'RUN_NAME': 'tiny',
      'TOKENS_PER_DEVICE': TINY_TOKENS_PER_DEVICE, 'EVAL_SPLIT': 'test',
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


def _notebook_parameters() -> dict:
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  values = {}
  exec(notebook.cells[_parameters_cell(notebook)].source, values)  # assignments only
  return values


def _notebook_functions() -> dict:
  """The functions the notebook's code cells define, with those cells' imports."""
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  body = []
  for cell in notebook.cells:
    if cell.cell_type == 'code':
      nodes = ast.parse(cell.source).body
      if any(isinstance(node, ast.FunctionDef) for node in nodes):
        body += [node for node in nodes
                 if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
  namespace = {}
  exec(compile(ast.Module(body=body, type_ignores=[]), NOTEBOOK, 'exec'), namespace)
  return namespace


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
  # The test sets every parameter the notebook has, and no name the notebook lacks.
  assert set(_parameters('/tmp', 1)) == set(_notebook_parameters()) - {'REPO_URL',
                                                                       '__builtins__'}


def test_runtime_is_found_from_its_devices(tmp_path):
  runtime_platform = _notebook_functions()['runtime_platform']

  def machine(*device_files, environ=None) -> str:
    dev = tmp_path / str(len(list(tmp_path.iterdir())))
    for name in device_files:
      (dev / name).parent.mkdir(parents=True, exist_ok=True)
      (dev / name).touch()
    dev.mkdir(exist_ok=True)
    return runtime_platform(environ or {}, str(dev))

  assert machine() == 'cpu'
  assert machine('vfio/vfio') == 'cpu'  # VFIO's container alone is no TPU
  assert machine('nvidia0', 'nvidiactl') == 'gpu'
  assert machine('accel0', 'accel1', 'accel2', 'accel3') == 'tpu'  # TPU v2 to v4
  assert machine('vfio/0', 'vfio/vfio') == 'tpu'  # v5e and later
  assert machine(environ={'TPU_ACCELERATOR_TYPE': 'v5e-1'}) == 'tpu'


def test_install_command_keeps_the_runtimes_jax_build():
  install_command = _notebook_functions()['install_command']
  # JAX's build for each runtime, in the same pip command as the package: pip resolves them
  # together, so installing the package cannot replace that build with another.
  builds = {}
  for platform, driver in (('tpu', None), ('gpu', '580.65.06'), ('gpu', '550.54.15'),
                           ('cpu', None)):
    command = install_command(platform, '/content/repo', driver)
    assert command[1:4] == ['-m', 'pip', 'install'] and '--upgrade' in command
    assert command[-1] == '/content/repo[wmt]'
    [build] = [word for word in command if word.startswith('jax')]
    builds[platform, driver] = build
  assert builds == {('tpu', None): 'jax[tpu]', ('gpu', '580.65.06'): 'jax[cuda13]',
                    ('gpu', '550.54.15'): 'jax[cuda12]', ('cpu', None): 'jax'}
  # The extras exist in the installed JAX, and its TPU extra brings the TPU runtime with a
  # jaxlib of JAX's own version.
  metadata = importlib.metadata.metadata('jax')
  assert {'tpu', 'cuda12', 'cuda13'} <= set(metadata.get_all('Provides-Extra'))
  tpu = [r for r in metadata.get_all('Requires-Dist') if 'extra == "tpu"' in r]
  assert any(r.startswith('libtpu') for r in tpu)
  assert any(r.startswith('jaxlib') and metadata['Version'] in r for r in tpu)


@pytest.mark.parametrize('devices', [1, 4, 8])
def test_base_batch_fits_1_4_or_8_cores(devices):
  micro_batches = _notebook_functions()['micro_batches']
  tokens_per_device = _notebook_parameters()['TOKENS_PER_DEVICE']
  config = loading.from_file(os.path.join(ROOT, 'configs', 'base.py'))
  data = config.data
  k = micro_batches(data.tokens_per_batch, data.max_length, devices, tokens_per_device)
  config.train.grad_accum_steps = k
  checks.validate(config)
  # Each core holds what each of the paper's 8 GPUs did: the cores times the micro-batches
  # are 8.
  assert devices * k == 8
  # The batcher of that layout (a micro-batch's sequences split over the cores) takes the batch,
  # and a core's share of a micro-batch of full-length sequences (packed, as on a TPU) is at most
  # TOKENS_PER_DEVICE tokens.
  train = batching.Batcher(None, data.max_length, data.tokens_per_batch, devices * k)
  evaluation = batching.Batcher(None, data.max_length, data.tokens_per_batch // k, devices)
  sequences = train.sequences_per_batch(data.max_length)
  assert sequences % (devices * k) == 0
  assert 0 < sequences // (devices * k) * data.max_length <= tokens_per_device
  assert evaluation.sequences_per_batch(data.max_length) // devices == sequences // (devices * k)


@pytest.mark.slow  # end-to-end: trains models (`pytest -m "not slow"` leaves it out)
def test_notebook_trains_evaluates_and_resumes(tmp_path, monkeypatch):
  monkeypatch.setenv('XLA_FLAGS', xla_flags(8))
  monkeypatch.setenv('JAX_PLATFORMS', 'cpu')
  workdir = tmp_path / 'tiny'

  # Run outside the repository: the notebook needs only the installed package. Its miniature
  # Table 3: a tiny sweep of two rows, side by side on two of the 8 cores.
  sweep = _sweep_file(tmp_path, {'small': {}, 'seed1': {'seed': 1}})
  first = _run(_parameters(str(tmp_path), steps=20, table3=sweep), str(tmp_path))
  assert 'JAX sees 8 CPU device(s)' in first
  assert 'over 8 device(s), in 1 micro-batch(es)' in first
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
    where = first.split(f'{row}: training in ')[1].splitlines()[0]
    assert where.startswith(f'{table3}/{row} on device '), where
    devices.add(where.split()[-1])
  assert len(devices) == 2  # side by side, each on a device of its own
  assert '| small |' in first and '| seed1 |' in first  # the table printed

  # Colab disconnected and gave a runtime of one core; "Run all" again with a longer budget
  # continues from step 20, the same batch now accumulated over 4 micro-batches.
  monkeypatch.setenv('XLA_FLAGS', xla_flags(1))
  second = _run(_parameters(str(tmp_path), steps=30, table3=sweep), str(tmp_path))
  assert 'JAX sees 1 CPU device(s)' in second
  assert json.loads((workdir / 'config.json').read_text())['train']['grad_accum_steps'] == 4
  assert second.count('done already') == 2
  assert 'Resumed from step 20' in second
  assert sorted(os.listdir(workdir / 'checkpoints'), key=int)[-1] == '30'
  assert list((workdir / 'eval').glob('test-step30-avg2-beam2-*.json'))
