"""experiments/paper_figures/plot_paper.py: §3.2.1's argument holds in its numbers (unscaled dot products
saturate the softmax as d_k grows and starve its gradient; scaled ones do not), and the command
writes its three figures."""

import os
import subprocess
import sys

import pytest

from transformer_jax.config import loading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, 'experiments', 'paper_figures', 'plot_paper.py')
plot_paper = loading.load_module(SCRIPT)


def test_unscaled_dot_products_saturate_the_softmax_and_scaled_ones_do_not():
  result = plot_paper.saturation(d_ks=(4, 64, 1024), samples=500)
  unscaled, scaled = result['max_unscaled'], result['max_scaled']
  assert unscaled[0] < unscaled[1] < unscaled[2] and unscaled[2] > 0.9
  # 32 keys: a softmax of N(0, 1) scores peaks near 0.16 whatever d_k is.
  assert max(scaled) - min(scaled) < 0.02 and max(scaled) < 0.2
  assert result['grad_unscaled'][2] < result['grad_scaled'][2] / 2


@pytest.mark.slow
def test_command_writes_the_three_figures(tmp_path):
  result = subprocess.run([sys.executable, SCRIPT, f'--output={tmp_path}'], cwd=tmp_path,
                          capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-2000:]
  for name in ('positional_encoding.png', 'learning_rate.png', 'softmax_saturation.png'):
    assert (tmp_path / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
