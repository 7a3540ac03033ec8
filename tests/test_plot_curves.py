"""experiments/plot_curves.py draws what metrics.jsonl holds, a resumed run's repeated steps
once (the last record), and writes a PNG from the command line."""

import importlib.util
import os
import subprocess
import sys

import numpy as np

from transformer_jax import metrics_log

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, 'experiments', 'plot_curves.py')


def _log(workdir) -> None:
  log = metrics_log.MetricsLog(str(workdir))
  for step, loss in ((100, 6.0), (200, 5.0), (200, 4.5), (300, 4.0)):  # 200 again: resumed
    log.write(step, 'train', {'loss': loss, 'learning_rate': step * 1e-5})
  log.write(200, 'validation', {'nll': 4.8, 'bleu': 3.5})
  log.write(300, 'validation', {'nll': 4.1})  # no BLEU at this evaluation
  log.close()


def test_panels_hold_the_logged_values(tmp_path):
  _log(tmp_path)
  spec = importlib.util.spec_from_file_location('plot_curves', SCRIPT)
  plot_curves = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(plot_curves)
  figure = plot_curves.plot(metrics_log.read(str(tmp_path / 'metrics.jsonl')), 'run')
  losses, bleu, rate = figure.axes
  train_loss, dev_nll = losses.lines
  np.testing.assert_array_equal(train_loss.get_xdata(), [100, 200, 300])
  np.testing.assert_array_equal(train_loss.get_ydata(), [6.0, 4.5, 4.0])
  np.testing.assert_array_equal(dev_nll.get_ydata(), [4.8, 4.1])
  np.testing.assert_array_equal(bleu.lines[0].get_xdata(), [200])
  np.testing.assert_array_equal(bleu.lines[0].get_ydata(), [3.5])
  np.testing.assert_allclose(rate.lines[0].get_ydata(), [1e-3, 2e-3, 3e-3])


def test_command_writes_a_png_and_names_a_missing_log(tmp_path):
  _log(tmp_path)
  output = tmp_path / 'curves.png'
  done = subprocess.run([sys.executable, SCRIPT, f'--workdir={tmp_path}', f'--output={output}'],
                        cwd=REPO, env={**os.environ, 'PYTHONPATH': REPO}, capture_output=True,
                        text=True)
  assert done.returncode == 0, done.stderr[-2000:]
  assert output.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  missing = subprocess.run([sys.executable, SCRIPT, f'--workdir={tmp_path / "nothing"}',
                            f'--output={output}'], cwd=REPO,
                           env={**os.environ, 'PYTHONPATH': REPO}, capture_output=True, text=True)
  assert missing.returncode != 0
  assert 'nothing/metrics.jsonl not found' in missing.stderr
