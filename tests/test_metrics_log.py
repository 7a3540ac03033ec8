"""workdir/metrics.jsonl: a resumed run appends after a line a crash left half-written."""

import json

import pytest

from transformer_jax.training import metrics_log


def test_a_half_written_last_line_is_cut_before_a_resumed_run_appends(tmp_path):
  path = tmp_path / 'metrics.jsonl'
  path.write_text(json.dumps({'step': 1, 'split': 'train', 'loss': 2.0}) + '\n'
                  + '{"step": 2, "split": "tr')  # a full disk stopped this write
  log = metrics_log.MetricsLog(str(tmp_path))
  log.write(2, 'train', {'loss': 1.5})
  log.close()
  assert [(r['step'], r['loss']) for r in metrics_log.read(str(path))] == [(1, 2.0), (2, 1.5)]


def test_a_damaged_line_is_an_error_naming_the_file_and_line(tmp_path):
  path = tmp_path / 'metrics.jsonl'
  path.write_text(json.dumps({'step': 1, 'split': 'train'}) + '\n{"step": 2, "spl\n')
  with pytest.raises(ValueError, match=f'{path}:2: not a metrics record'):
    metrics_log.read(str(path))
