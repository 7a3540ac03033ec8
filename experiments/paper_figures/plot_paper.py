r"""The figures the paper's readers redraw, from this code's own functions.

  python experiments/paper_figures/plot_paper.py --output=experiments/paper_figures

Writes three PNGs:
  positional_encoding.png  the sinusoids of §3.5 (`embeddings.sinusoid`): a few dimensions
      against the position, and the whole table for d_model 512;
  learning_rate.png  eq. 3 (`optimizer.learning_rate_schedule`) for configs/base.py,
      configs/big.py, configs/multi30k.py and the miniature Table 3's base;
  softmax_saturation.png  §3.2.1's argument for the 1/sqrt(d_k) scale: with query and key
      components of mean 0 and variance 1, q·k has variance d_k, so without the scale the
      softmax over the keys saturates as d_k grows (its largest weight tends to 1) and its
      gradient vanishes; with the scale both stay put.
"""

import os

from absl import app, flags
import matplotlib
import numpy as np

from transformer_jax.config import loading
from transformer_jax.model import embeddings
from transformer_jax.training import optimizer

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

D_K = (4, 16, 64, 256, 1024)


def _config(name: str):
  return loading.from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), name))


def saturation(d_ks=D_K, keys: int = 32, samples: int = 2000, seed: int = 0) -> dict:
  """For each d_k, over random queries and keys with N(0, 1) components: the mean largest
  softmax weight, and the mean Frobenius norm of the softmax's Jacobian (how much gradient
  reaches the scores), unscaled and scaled by 1/sqrt(d_k)."""
  rng = np.random.default_rng(seed)
  result = {name: [] for name in ('max_unscaled', 'max_scaled', 'grad_unscaled',
                                  'grad_scaled')}
  for d_k in d_ks:
    q = rng.standard_normal((samples, 1, d_k))
    k = rng.standard_normal((samples, keys, d_k))
    scores = (q * k).sum(-1)
    for name, s in (('unscaled', scores), ('scaled', scores / np.sqrt(d_k))):
      p = np.exp(s - s.max(-1, keepdims=True))
      p /= p.sum(-1, keepdims=True)
      jacobian = p[:, :, None] * (np.eye(keys)[None] - p[:, None, :])  # d p_i / d s_j
      result[f'max_{name}'].append(float(p.max(-1).mean()))
      result[f'grad_{name}'].append(float(np.linalg.norm(jacobian, axis=(1, 2)).mean()))
  return result


def plot_positional_encoding(path: str) -> None:
  table = embeddings.sinusoid(100, 512)
  figure, (curves, heat) = plt.subplots(1, 2, figsize=(12, 4))
  for dim in (4, 5, 6, 7, 40):
    curves.plot(table[:, dim], label=f'dimension {dim}')
  curves.set_xlabel('position')
  curves.legend(fontsize=8)
  curves.set_title('PE(pos, i), d_model 512 (§3.5)')
  image = heat.imshow(table, aspect='auto', cmap='RdBu')
  heat.set_xlabel('dimension')
  heat.set_ylabel('position')
  figure.colorbar(image, ax=heat)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def plot_learning_rate(path: str) -> None:
  steps = np.arange(1, 100_001)
  figure, ax = plt.subplots(figsize=(7, 4))
  for label, config in (('base', _config('../../configs/base.py')),
                        ('big', _config('../../configs/big.py')),
                        ('multi30k', _config('../../configs/multi30k.py')),
                        ('Table 3 miniature', _config('../table3_multi30k/sweep.py'))):
    rate = optimizer.schedule(config)(steps - 1)
    ax.plot(steps, rate, label=f'{label}: d_model {config.model.d_model}, warmup '
            f'{config.train.warmup_steps}')
  ax.set_xscale('log')
  ax.set_xlabel('step')
  ax.set_ylabel('learning rate')
  ax.set_title('eq. 3: d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)')
  ax.legend(fontsize=8)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def plot_saturation(path: str) -> None:
  result = saturation()
  figure, (top, grad) = plt.subplots(1, 2, figsize=(11, 4))
  for name, style in (('unscaled', 'o-'), ('scaled', 's-')):
    label = 'q·k' if name == 'unscaled' else 'q·k / sqrt(d_k)'
    top.plot(D_K, result[f'max_{name}'], style, label=label)
    grad.plot(D_K, result[f'grad_{name}'], style, label=label)
  top.set_ylabel('mean largest softmax weight (32 keys)')
  grad.set_ylabel('mean norm of the softmax Jacobian')
  for ax in (top, grad):
    ax.set_xscale('log', base=2)
    ax.set_xlabel('d_k')
    ax.legend()
  figure.suptitle('§3.2.1: without the scale the softmax saturates and its gradient vanishes')
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


if __name__ == '__main__':
  _OUTPUT = flags.DEFINE_string('output', None, 'Directory for the PNGs.', required=True)

  def main(argv):
    del argv
    os.makedirs(_OUTPUT.value, exist_ok=True)
    plot_positional_encoding(os.path.join(_OUTPUT.value, 'positional_encoding.png'))
    plot_learning_rate(os.path.join(_OUTPUT.value, 'learning_rate.png'))
    plot_saturation(os.path.join(_OUTPUT.value, 'softmax_saturation.png'))

  app.run(main)
