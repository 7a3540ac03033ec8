r"""Where a train step's device time goes: kernel time per step, by kernel and by kind.

  python experiments/gpu/profile_step.py --config=configs/base.py --config.dtype=bfloat16 \
      [--length=32 --steps=5] [--output=OUT.json] [--trace_dir=DIR]

Runs the jitted train step of `transformer_jax.benchmark` (same batch, same warm-up) under
`jax.profiler.trace`, then reads the Perfetto trace it writes and sums the duration of every
device kernel over the traced steps. Prints the total kernel time per step, the share of each
kind (matrix products, reductions, elementwise fusions, copies, ...) and the kernels that take
the most time. For a GPU: other devices' traces are not read.
"""

import collections
import contextlib
import glob
import gzip
import json
import os
import re
import tempfile

from absl import flags
import jax
from ml_collections import config_flags

from transformer_jax import benchmark, cli
from transformer_jax.config import platforms
from transformer_jax.storage import provenance

# Kernel name -> kind, first match wins. cuBLAS / cuDNN / CUTLASS / Triton product kernels,
# then XLA's fusion kinds by the prefixes its emitters give them.
_KINDS = (
    ('matmul', r'gemm|nvjet|cutlass|xmma|cublas|wgmma|sm90_|sm80_'),
    ('reduction', r'reduce|reduction'),
    ('copy/transpose', r'copy|transpose|memcpy|memset'),
    ('scatter/gather', r'scatter|gather|dynamic_update_slice|dynamic_slice'),
    ('rng', r'rng|threefry|random|philox'),
    ('elementwise fusion', r'fusion|loop_|input_'),
)


def kind(name: str) -> str:
  for label, pattern in _KINDS:
    if re.search(pattern, name, re.IGNORECASE):
      return label
  return 'other'


def device_kernels(trace_path: str) -> list[tuple[str, float]]:
  """(name, microseconds) of every complete event on a GPU's stream in a Perfetto trace."""
  with gzip.open(trace_path, 'rt') as f:
    trace = json.load(f)
  events = trace['traceEvents'] if isinstance(trace, dict) else trace
  device_pids = {e['pid'] for e in events
                 if e.get('ph') == 'M' and e.get('name') == 'process_name'
                 and re.search(r'/device:GPU', e.get('args', {}).get('name', ''))}
  stream_tids = {(e['pid'], e['tid']) for e in events
                 if e.get('ph') == 'M' and e.get('name') == 'thread_name'
                 and e['pid'] in device_pids
                 and re.search(r'stream', e.get('args', {}).get('name', ''), re.IGNORECASE)}
  return [(e['name'], float(e.get('dur', 0.0))) for e in events
          if e.get('ph') == 'X' and (e.get('pid'), e.get('tid')) in stream_tids]


def summarise(kernels: list[tuple[str, float]], steps: int, top: int) -> dict:
  by_name = collections.defaultdict(lambda: [0.0, 0])
  by_kind = collections.defaultdict(float)
  for name, micros in kernels:
    by_name[name][0] += micros
    by_name[name][1] += 1
    by_kind[kind(name)] += micros
  total = sum(by_kind.values())

  def ms(micros):
    return round(micros / steps / 1000, 3)

  return {
      'kernel_ms_per_step': ms(total),
      'kernels_per_step': len(kernels) / steps,
      'by_kind_ms': {k: ms(v) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
      'top_kernels': [{'name': n, 'ms': ms(v[0]), 'calls': v[1] / steps, 'kind': kind(n)}
                      for n, v in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]],
  }


def main():
  config = platforms.resolved(_CONFIG.value)  # 'auto' as this platform's default
  step, _, sequences = benchmark.prepared_step(config, None, _LENGTH.value, warmup=3)
  with contextlib.ExitStack() as stack:
    trace_dir = _TRACE_DIR.value or stack.enter_context(tempfile.TemporaryDirectory())
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      for _ in range(_STEPS.value):
        metrics = step()
      jax.block_until_ready(metrics)
    # The newest trace: a kept --trace_dir may hold earlier ones.
    traces = glob.glob(os.path.join(trace_dir, '**', '*perfetto_trace.json.gz'), recursive=True)
    if not traces:
      raise SystemExit(f'jax.profiler wrote no Perfetto trace under {trace_dir}')
    trace_path = max(traces, key=os.path.getmtime)
    kernels = device_kernels(trace_path)
  if not kernels:
    raise SystemExit('the trace has no GPU kernels: run this on a GPU')
  # A call runs train.steps_per_call steps: the figures are per step.
  summary = summarise(kernels, _STEPS.value * config.train.steps_per_call, _TOP.value)
  summary.update(provenance=provenance.record(jax.devices()[0].device_kind),
                 dtype=config.dtype, batch_size=sequences,
                 length=_LENGTH.value, steps_per_call=config.train.steps_per_call,
                 trace=trace_path if _TRACE_DIR.value else None)
  text = json.dumps(summary, indent=1)
  print(text)
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  _CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file.', lock_config=True)
  _LENGTH = flags.DEFINE_integer('length', 32, 'Source and target length of every pair.')
  _STEPS = flags.DEFINE_integer('steps', 5, 'Traced calls (of train.steps_per_call steps).',
                                lower_bound=1)
  _TOP = flags.DEFINE_integer('top', 40, 'Kernels listed.')
  _OUTPUT = flags.DEFINE_string('output', None, 'Write the summary here as JSON.')
  cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')
  _TRACE_DIR = flags.DEFINE_string('trace_dir', None, 'Keep the trace here (default: discarded).')
  flags.mark_flag_as_required('config')
  cli.run(main)
