"""transformer_jax.visualize: the attention weights it collects are eq. 1's softmax from the
float64 reference, rows sum to 1 and masked positions get 0; the command writes one grid and one
line picture per kind and layer and a page holding every head; bad input is a one-line error."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import (SMALL, init_params, perturbed, text_of_max_length, tiny_config,
                      train_config)
from reference import Reference
from transformer_jax import visualize
from transformer_jax.decoding.translator import Translator
from transformer_jax.loop import train_loop
from transformer_jax.model.transformer import Transformer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_weights_equal_the_float64_reference_and_respect_the_masks():
  cfg = tiny_config(num_layers=2)
  rng = np.random.default_rng(0)
  params = perturbed(init_params(cfg), rng)
  inputs = np.append(rng.integers(3, cfg.vocab_size, 6), 1).astype(np.int32)  # EOS = 1
  targets = np.append(rng.integers(3, cfg.vocab_size, 4), 1).astype(np.int32)
  weights = visualize.attention_weights(Transformer(cfg), params, inputs, targets)

  reference = Reference(params, cfg.num_layers)
  reference(inputs, np.concatenate([[0], targets[:-1]]))
  for kind, (stack, name) in visualize.KINDS.items():
    expected = np.stack([np.stack(reference.attention[stack, n, name])
                         for n in range(cfg.num_layers)])
    assert weights[kind].shape == expected.shape == (
        cfg.num_layers, cfg.num_heads,
        len(targets) if stack == 'decoder' else len(inputs),
        len(inputs) if kind != 'decoder_self' else len(targets))
    np.testing.assert_allclose(weights[kind], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights[kind].sum(-1), 1.0, rtol=1e-6)
  # The decoder never looks ahead: every weight above the diagonal is exactly 0.
  future = np.triu(np.ones((len(targets), len(targets)), bool), k=1)
  assert np.all(weights['decoder_self'][..., future] == 0)


def test_farthest_query_is_the_one_attending_far_from_itself():
  weights = np.tile(np.eye(5), (2, 1, 1))  # every query attends to itself
  weights[:, 3] = 0
  weights[:, 3, 0] = 1  # but query 3 looks back to the first token
  assert visualize.farthest_query(weights) == 3


def test_a_grid_has_one_heat_map_per_head():
  figure = visualize.head_grid(np.full((6, 3, 4), 0.25), list('abc'), list('wxyz'), 'test')
  assert sum(1 for ax in figure.axes if ax.images) == 6


@pytest.fixture(scope='module')
def workdir(tmp_path_factory) -> str:
  path = str(tmp_path_factory.mktemp('visualize'))
  train_loop.train_and_evaluate(train_config(**{
      'data.vocab_size': 128,
      'train.num_train_steps': 2, 'train.eval_every_steps': 2, 'train.num_eval_steps': 1,
      'train.eval_bleu': False, 'train.checkpoint_every_steps': 2}), path)
  return path


def _visualize(*args) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-m', 'transformer_jax.visualize', *args], cwd=REPO,
                        capture_output=True, text=True)


@pytest.mark.slow
def test_command_writes_every_picture_and_the_page(workdir, tmp_path):
  """As docs/visualization.md's example runs it: without --target, the pictures of the model's
  own translation, which the command prints and --json writes."""
  output = tmp_path / 'pictures'
  result = _visualize(f'--workdir={workdir}', '--source=the dog sees a cat .',
                      f'--output={output}', '--json', '--token=.')
  assert result.returncode == 0, result.stderr[-2000:]
  layers, heads = SMALL['model.num_layers'], SMALL['model.num_heads']
  names = sorted(os.listdir(output))
  assert len(names) == 3 * layers * 2 + 2  # the pictures, the page, attention.json
  for kind in visualize.KINDS:
    for layer in range(layers):
      for name in (f'{kind}_layer{layer}.png', f'lines_{kind}_layer{layer}.png'):
        assert (output / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  page = (output / 'attention.html').read_text()
  data = json.loads(page.split('const data = ')[1].split(';\n')[0])
  assert {kind: np.array(w).shape[:2] for kind, w in data['weights'].items()} == {
      kind: (layers, heads) for kind in visualize.KINDS}
  dumped = json.loads((output / 'attention.json').read_text())
  assert result.stdout.splitlines()[0] == f'the dog sees a cat . -> {dumped["target"]}'
  assert dumped['source_tokens'][-1] == '</s>' and dumped['target_tokens'][-1] == '</s>'
  encoder = np.array(dumped['weights']['encoder_self'])
  assert encoder.shape == (layers, heads, len(dumped['source_tokens']),
                           len(dumped['source_tokens']))


@pytest.mark.slow
def test_bad_input_is_a_one_line_error(workdir, tmp_path):
  # The command turns a ValueError into its one-line error (cli.run): shown once here, and
  # each bad input's ValueError, naming the flag, checked in-process below.
  result = _visualize(f'--workdir={workdir}', f'--output={tmp_path}', '--source= ')
  assert result.returncode != 0
  assert result.stderr.strip().splitlines()[-1].startswith('error: ')
  assert '--source is empty' in result.stderr and 'Traceback' not in result.stderr
  translator = Translator(workdir)
  with pytest.raises(ValueError, match='--source is empty'):
    visualize.collect(translator, ' ', None)
  with pytest.raises(ValueError, match='--source:1: '):
    visualize.collect(translator, 'dog ' * 200, None)
  with pytest.raises(ValueError, match='--target:1: '):
    visualize.collect(translator, 'a dog .', 'Hund ' * 200)
  result = visualize.collect(translator, 'a dog .', 'ein Hund .')
  with pytest.raises(ValueError, match='--token=cat: no such word piece'):
    visualize.write(result, str(tmp_path / 'pictures'), 'cat')
  assert not (tmp_path / 'pictures').exists()


@pytest.mark.slow
def test_a_source_of_exactly_the_maximum_length_is_shown_whole(workdir):
  translator = Translator(workdir)
  source = text_of_max_length(translator)
  result = visualize.collect(translator, source, 'a')
  assert len(result['source_tokens']) == translator.config.data.max_length
  with pytest.raises(ValueError, match="--source:1: "):
    visualize.collect(translator, source + ' a', 'a')


@pytest.mark.slow
def test_an_unknown_workdir_is_a_one_line_error(tmp_path):
  result = _visualize(f'--workdir={tmp_path / "missing"}', '--source=a dog .')
  assert result.returncode != 0
  assert result.stderr.strip() == f'error: --workdir={tmp_path / "missing"}: no such directory'
