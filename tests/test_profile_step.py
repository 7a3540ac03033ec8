"""experiments/gpu/profile_step.py: kernel time per step from a Perfetto trace, by kernel and kind."""

import gzip
import json

import pytest

from transformer_jax.config import loading

# Its flags are defined only when it runs as a script, so loading it defines none.
profile_step = loading.import_sibling(__file__, '../experiments/gpu/profile_step')


def _trace(path, kernels, host_events):
  """A Perfetto trace as JAX's profiler writes it: a GPU process with one stream, a host
  process; kernels (name, µs) on the stream, host_events (name, µs) on a host thread."""
  meta = [
      {'ph': 'M', 'pid': 1, 'name': 'process_name', 'args': {'name': '/device:GPU:0'}},
      {'ph': 'M', 'pid': 1, 'tid': 14, 'name': 'thread_name',
       'args': {'name': 'Stream #14(Compute,Memset)'}},
      {'ph': 'M', 'pid': 701, 'name': 'process_name', 'args': {'name': '/host:CPU'}},
      {'ph': 'M', 'pid': 701, 'tid': 3, 'name': 'thread_name', 'args': {'name': 'python'}},
  ]
  events = [{'ph': 'X', 'pid': 1, 'tid': 14, 'ts': 10.0 * i, 'dur': dur, 'name': name}
            for i, (name, dur) in enumerate(kernels)]
  events += [{'ph': 'X', 'pid': 701, 'tid': 3, 'ts': 0.0, 'dur': dur, 'name': name}
             for name, dur in host_events]
  with gzip.open(path, 'wt') as f:
    json.dump({'traceEvents': meta + events}, f)


def test_kernel_time_per_step_counts_device_streams_only(tmp_path):
  path = str(tmp_path / 'perfetto_trace.json.gz')
  # Two steps: per step a 300 µs product, two 50 µs reductions, one 100 µs elementwise fusion.
  step = [('nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT', 300.0),
          ('input_reduce_fusion_3', 50.0), ('input_reduce_fusion_3', 50.0),
          ('loop_add_fusion', 100.0)]
  # A host event named like a kernel must not count.
  _trace(path, step * 2, host_events=[('loop_add_fusion', 5000.0)])
  summary = profile_step.summarise(profile_step.device_kernels(path), steps=2, top=2)
  assert summary['kernel_ms_per_step'] == pytest.approx(0.5)
  assert summary['kernels_per_step'] == 4
  assert summary['by_kind_ms'] == pytest.approx(
      {'matmul': 0.3, 'reduction': 0.1, 'elementwise fusion': 0.1})
  assert [k['name'] for k in summary['top_kernels']] == [step[0][0], 'input_reduce_fusion_3']
  assert summary['top_kernels'][1]['calls'] == 2 and summary['top_kernels'][1]['ms'] == 0.1


@pytest.mark.parametrize('name, kind', [
    ('gemm_fusion_dot_419', 'matmul'),
    ('nvjet_sm90_tss_128x128_64x6_1x2_h_bz_NTT', 'matmul'),
    ('input_add_reduce_fusion_12', 'reduction'),
    ('loop_transpose_fusion_70', 'copy/transpose'),
    ('loop_select_fusion_2', 'elementwise fusion'),
    ('wrapped_convert_109', 'other'),
])
def test_kernel_kinds(name, kind):
  assert profile_step.kind(name) == kind
