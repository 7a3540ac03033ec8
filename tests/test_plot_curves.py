"""experiments/tools/plot_curves.py draws what metrics.jsonl holds, a resumed run's repeated steps
once (the last record), and writes a PNG from the command line."""

import os
import subprocess
import sys

import numpy as np
import pytest

from transformer_jax.config import loading
from transformer_jax.training import metrics_log

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, 'experiments', 'tools', 'plot_curves.py')
# Its flags are defined only when it runs as a script, so loading it defines none.
plot_curves = loading.import_sibling(__file__, '../experiments/tools/plot_curves')


def _log(workdir) -> None:
  log = metrics_log.MetricsLog(str(workdir))
  for step, loss in ((100, 6.0), (200, 5.0), (200, 4.5), (300, 4.0)):  # 200 again: resumed
    log.write(step, 'train', {'loss': loss, 'learning_rate': step * 1e-5})
  log.write(200, 'validation', {'nll': 4.8, 'bleu': 3.5})
  log.write(300, 'validation', {'nll': 4.1})  # no BLEU at this evaluation
  log.close()


def test_panels_hold_the_logged_values(tmp_path):
  _log(tmp_path)
  figure = plot_curves.plot({'run': metrics_log.read(str(tmp_path / 'metrics.jsonl'))})
  losses, bleu, rate = figure.axes
  train_loss, dev_nll = losses.lines
  np.testing.assert_array_equal(train_loss.get_xdata(), [100, 200, 300])
  np.testing.assert_array_equal(train_loss.get_ydata(), [6.0, 4.5, 4.0])
  np.testing.assert_array_equal(dev_nll.get_ydata(), [4.8, 4.1])
  np.testing.assert_array_equal(bleu.lines[0].get_xdata(), [200])
  np.testing.assert_array_equal(bleu.lines[0].get_ydata(), [3.5])
  np.testing.assert_allclose(rate.lines[0].get_ydata(), [1e-3, 2e-3, 3e-3])


def test_several_runs_are_overlaid_with_their_names(tmp_path):
  first, second = tmp_path / 'first', tmp_path / 'second'
  for workdir in (first, second):
    workdir.mkdir()
    _log(workdir)
  log = metrics_log.MetricsLog(str(second))
  log.write(400, 'train', {'loss': 3.0, 'learning_rate': 4e-3})
  log.close()
  figure = plot_curves.plot({name: metrics_log.read(str(tmp_path / name / 'metrics.jsonl'))
                            for name in ('first', 'second')})
  losses, bleu, rate = figure.axes
  assert [line.get_label() for line in losses.lines] == [
      'first: train loss (label-smoothed)', 'first: dev NLL',
      'second: train loss (label-smoothed)', 'second: dev NLL']
  np.testing.assert_array_equal(losses.lines[2].get_ydata(), [6.0, 4.5, 4.0, 3.0])
  assert [line.get_label() for line in bleu.lines] == ['first', 'second']
  np.testing.assert_array_equal(rate.lines[1].get_xdata(), [100, 200, 300, 400])


@pytest.mark.slow
def test_command_writes_a_png_and_names_a_missing_log(tmp_path):
  _log(tmp_path)
  output = tmp_path / 'curves.png'
  done = subprocess.run([sys.executable, SCRIPT, f'--workdir={tmp_path}', f'--output={output}'],
                        cwd=REPO, capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[-2000:]
  assert output.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  both = subprocess.run([sys.executable, SCRIPT, f'--workdir={tmp_path},{tmp_path}',
                         f'--output={output}'], cwd=REPO, capture_output=True, text=True)
  assert both.returncode == 0, both.stderr[-2000:]
  missing = subprocess.run([sys.executable, SCRIPT, f'--workdir={tmp_path / "nothing"}',
                            f'--output={output}'], cwd=REPO, capture_output=True, text=True)
  assert missing.returncode != 0
  assert 'nothing/metrics.jsonl not found' in missing.stderr
