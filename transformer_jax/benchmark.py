r"""Training throughput and model-FLOPs utilisation (MFU) of a config on the present devices.

  python -m transformer_jax.benchmark --config=configs/base.py [--batch_size=32 --length=32]
      [--steps=20] [--packed] [--json]

Times the jitted, sharded train step (the one `train.py` runs) on random tokens of fixed
shape, after warm-up steps that include compilation; with `train.steps_per_call` K > 1, K steps
a call as `train.py` runs them then (`Trainer.train_steps`), the times given per step. The step
time is that of calls dispatched back to back, as `train.py` runs them (the host waits for
nothing until it logs): the median over 3 runs of --steps calls. Beside it,
`step_time_waited_s` is the median of --steps calls each waited for, which adds the host's
dispatch and the device's start to every call. Model
FLOPs per step are 3x the forward matmul FLOPs of `costs.forward_flops` (backward = 2x
forward). The device's dense matmul throughput is measured in the same run, with square
matmuls in the config's dtype, so MFU = achieved / measured peak is comparable across
hardware; the vendor's datasheet peak is not used.
"""

import json
import statistics
import time

from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np

from transformer_jax import cli
from transformer_jax.config import platforms
from transformer_jax.model import costs
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import provenance
from transformer_jax.training.trainer import Trainer


def _median_seconds(fn, repeats: int) -> float:
  """The median time of `repeats` calls of fn, waiting for each call's result."""
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _pipelined_seconds(fn, calls: int, rounds: int = 3) -> float:
  """Seconds per call of fn when `calls` calls are dispatched back to back and only the last
  is waited for, as `train.py` runs its steps (metrics are fetched when logging); the median
  of `rounds` such runs."""
  times = []
  for _ in range(rounds):
    start = time.perf_counter()
    for _ in range(calls):
      result = fn()
    jax.block_until_ready(result)
    times.append((time.perf_counter() - start) / calls)
  return statistics.median(times)


def matmul_peak(dtype, sizes=None) -> float:
  """Measured dense matmul FLOP/s of the default device: the best of square n x n matmuls,
  each timed back to back (`_pipelined_seconds`)."""
  if sizes is None:
    sizes = (1024, 2048) if jax.default_backend() == 'cpu' else (4096, 8192)
  best = 0.0
  for n in sizes:
    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), dtype)
    matmul = jax.jit(jnp.matmul)
    jax.block_until_ready(matmul(a, b))
    # Back to back, like the steps: a wait after each product adds the host's dispatch to
    # every one, and the peak comes out low
    # (experiments/gpu/README.md).
    best = max(best, 2 * n**3 / _pipelined_seconds(lambda: matmul(a, b), 20))
  return best


def prepared_step(config, batch_size: int | None, length: int, warmup: int,
                  packed: bool = False):
  """The jitted train step on one fixed random batch (packed: two pairs a sequence, with segment
  ids, as packed training batches come), run `warmup` times (compilation included): returns (step,
  model, sequences), where step() runs one more call (of `train.steps_per_call` steps, on that batch
  each) and returns its metrics. `config` is a validated one (`cli.run` validates the command's)."""
  model = ShardedModel(config)
  config = model.config  # 'auto' resolved for this platform
  trainer = Trainer(model)
  sequences = batch_size or config.data.tokens_per_batch // length
  sequences -= sequences % trainer.sequences_multiple
  if sequences == 0:
    raise ValueError(f'--batch_size (or config.data.tokens_per_batch // --length) must be at '
                     f'least {trainer.sequences_multiple} sequences, the batch shards times the '
                     'accumulation steps')
  rng = np.random.default_rng(0)
  tokens = lambda: rng.integers(1, config.data.vocab_size, (sequences, length), dtype=np.int32)
  targets = tokens()
  batch = {'inputs': tokens(), 'targets': targets,
           'decoder_inputs': np.pad(targets[:, :-1], ((0, 0), (1, 0)))}
  if packed:
    segments = np.where(np.arange(length) < length // 2, 1, 2).astype(np.int32)
    batch['source_segments'] = batch['target_segments'] = np.tile(segments, (sequences, 1))
    batch['decoder_inputs'][:, length // 2] = 0  # the second pair's decoder starts anew
  k = config.train.steps_per_call
  if k == 1:
    train_step, batch = trainer.train_step, model.put_batch(batch)
  else:
    train_step = trainer.train_steps
    batch = model.put_batches([batch] * k)
  state = trainer.init_state()

  def step():
    nonlocal state
    state, metrics = train_step(state, batch)
    return metrics

  _median_seconds(step, warmup)
  return step, model, sequences


def run(config, batch_size: int | None, length: int, num_steps: int, warmup: int,
        packed: bool = False) -> dict:
  config = platforms.resolved(config)  # 'auto' as this platform's default, as a run has it
  step, model, sequences = prepared_step(config, batch_size, length, warmup, packed)
  k = config.train.steps_per_call
  step_time = _pipelined_seconds(step, num_steps) / k
  waited_step_time = _median_seconds(step, num_steps) / k
  flops = 3 * sequences * costs.forward_flops(model.model_config, length, length)
  devices = jax.device_count()
  peak = matmul_peak(jnp.dtype(config.dtype)) * devices
  return {
      'device': jax.devices()[0].device_kind,
      'machine': provenance.machine(jax.devices()[0].device_kind),
      'num_devices': devices,
      'dtype': config.dtype,
      'batch_size': sequences,
      'length': length,
      'packed': packed,
      'steps_per_call': k,
      'loss_chunk': config.train.loss_chunk,
      'dropout_prng_impl': config.train.dropout_prng_impl,
      'step_time_s': step_time,
      'step_time_waited_s': waited_step_time,
      'target_tokens_per_s': sequences * length / step_time,
      'source_target_tokens_per_s': 2 * sequences * length / step_time,
      'model_flops_per_step': flops,
      'achieved_gflops_per_s': flops / step_time / 1e9,
      'matmul_peak_gflops_per_s': peak / 1e9,
      'mfu': flops / step_time / peak,
  }


def main():
  result = run(_CONFIG.value, _BATCH_SIZE.value, _LENGTH.value, _STEPS.value, _WARMUP.value,
               _PACKED.value)
  if _JSON.value:
    print(json.dumps(result))
    return
  print(f'{result["num_devices"]} x {result["device"]}, {result["dtype"]}, batch '
        f'{result["batch_size"]} x {result["length"]}+{result["length"]} tokens, '
        f'{result["steps_per_call"]} step(s) a call' + (', packed' if result['packed'] else ''))
  print(f'step time            {result["step_time_s"] * 1e3:.1f} ms '
        f'({result["step_time_waited_s"] * 1e3:.1f} ms waiting for each step)')
  print(f'target tokens/s      {result["target_tokens_per_s"]:.0f}')
  print(f'model FLOPs/step     {result["model_flops_per_step"]:.3e}')
  print(f'achieved             {result["achieved_gflops_per_s"]:.1f} GFLOP/s')
  print(f'matmul peak          {result["matmul_peak_gflops_per_s"]:.1f} GFLOP/s (measured)')
  print(f'MFU                  {result["mfu"]:.1%}')


if __name__ == '__main__':
  _CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file.', lock_config=True)
  _BATCH_SIZE = flags.DEFINE_integer(
      'batch_size', None, 'Sentence pairs per step (default: tokens_per_batch // length).')
  _LENGTH = flags.DEFINE_integer('length', 32, 'Source and target length of every pair.')
  _STEPS = flags.DEFINE_integer('steps', 20, 'Timed calls in each round.', lower_bound=1)
  _WARMUP = flags.DEFINE_integer('warmup', 3, 'Untimed calls first (compilation included).',
                                 lower_bound=1)
  _PACKED = flags.DEFINE_bool('packed', False, 'Sequences of two pairs each, with segment ids, as '
                              'packed training batches (data.pack_length) come.')
  _JSON = flags.DEFINE_bool('json', False, 'Print one JSON object instead of text.')
  flags.mark_flag_as_required('config')
  cli.run(main)
