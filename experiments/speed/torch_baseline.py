r"""Training throughput of transformer_jax against PyTorch's `nn.Transformer`, same shapes, on
the same device (a CUDA GPU where PyTorch finds one, else the CPU).

  pip install torch   # not a dependency of the package
  python experiments/speed/torch_baseline.py [--shapes=tiny,base] [--dtype=float32] [--compile] \
      [--steps=20] [--output=FILE]

A shape is a name in `experiments/speed/shapes.py` (its batch) or a config file, e.g.
`configs/base.py`: the paper's model at its batch of about 25000 source and 25000 target tokens
(§5.1; `data.tokens_per_batch` // 32 pairs of 32 + 32 tokens). For each it times, one after the
other in fresh processes so they never share the device, (1) a PyTorch training step: shared
embedding scaled by sqrt(d_model) plus sinusoids, `nn.Transformer` (post-norm, ReLU, dropout),
tied output projection, label-smoothed cross entropy (0.1), Adam (0.9, 0.98, 1e-9; fused on a
GPU), eager and, with --compile, with the forward and loss under `torch.compile` (the backward
follows from it); and (2) `python -m transformer_jax.benchmark` on the same shape. --dtype
bfloat16 runs PyTorch under `torch.autocast` and sets transformer_jax's `dtype`, both keeping
float32 parameters; float32 allows TF32 matrix products on a GPU, as XLA does by default. Times
are medians of 3 rounds of --steps steps after 3 warm-up steps (compilation included). On a CPU,
where PyTorch's steps are synchronous, each JAX step is waited for too
(`step_time_waited_s`); on a GPU both run back to back, waited for at each round's end.
"""

import json
import math
import statistics
import subprocess
import sys
import time

from absl import app, flags

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.storage import provenance

checkout = loading.import_sibling(__file__, '../tools/checkout')
shapes = loading.import_sibling(__file__, 'shapes')
LENGTH, SHAPES, VOCAB_SIZE = shapes.LENGTH, shapes.SHAPES, shapes.VOCAB_SIZE


def sizes_of(shape: str) -> dict:
  """The model and batch sizes of a shape name or a config file."""
  if shape in SHAPES:
    return {**SHAPES[shape], 'vocab_size': VOCAB_SIZE, 'dropout_rate': 0.1}
  config = loading.from_file(shape)
  m = config.model
  if m.d_k * m.num_heads != m.d_model or m.d_v != m.d_k:
    raise ValueError(f'{shape}: nn.Transformer needs d_k = d_v = d_model / num_heads')
  return dict(num_layers=m.num_layers, d_model=m.d_model, num_heads=m.num_heads, d_ff=m.d_ff,
              batch_size=config.data.tokens_per_batch // LENGTH,
              vocab_size=config.data.vocab_size, dropout_rate=m.dropout_rate)


def torch_step_times(sizes: dict, dtype: str, compiled: bool, num_steps: int) -> dict:
  """Seconds per PyTorch training step, eager and (`compiled`) under torch.compile."""
  import torch  # only this function needs PyTorch

  device = 'cuda' if torch.cuda.is_available() else 'cpu'
  torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
  d_model, batch, vocab = sizes['d_model'], sizes['batch_size'], sizes['vocab_size']
  torch.manual_seed(0)

  class Model(torch.nn.Module):

    def __init__(self):
      super().__init__()
      self.embedding = torch.nn.Embedding(vocab, d_model, padding_idx=0)
      self.transformer = torch.nn.Transformer(
          d_model, sizes['num_heads'], sizes['num_layers'], sizes['num_layers'], sizes['d_ff'],
          dropout=sizes['dropout_rate'], batch_first=True)
      self.dropout = torch.nn.Dropout(sizes['dropout_rate'])
      position = torch.arange(LENGTH)[:, None]
      rates = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
      table = torch.zeros(LENGTH, d_model)
      table[:, 0::2], table[:, 1::2] = torch.sin(position * rates), torch.cos(position * rates)
      self.register_buffer('positions', table)
      self.register_buffer('causal', torch.nn.Transformer.generate_square_subsequent_mask(LENGTH))

    def embed(self, tokens):
      return self.dropout(self.embedding(tokens) * d_model**0.5 + self.positions)

    def forward(self, inputs, decoder_inputs):
      y = self.transformer(self.embed(inputs), self.embed(decoder_inputs), tgt_mask=self.causal,
                           tgt_is_causal=True)
      return y @ self.embedding.weight.T

  model = Model().to(device)
  optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9,
                               fused=device == 'cuda')
  cross_entropy = torch.nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1)
  inputs = torch.randint(1, vocab, (batch, LENGTH), device=device)
  targets = torch.randint(1, vocab, (batch, LENGTH), device=device)
  decoder_inputs = torch.nn.functional.pad(targets[:, :-1], (1, 0))

  def loss_of(inputs, decoder_inputs, targets):
    with torch.autocast(device, torch.bfloat16, enabled=dtype == 'bfloat16'):
      logits = model(inputs, decoder_inputs)
    return cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))

  def seconds_per_step(loss_fn) -> float:
    def step():
      optimizer.zero_grad(set_to_none=True)
      loss_fn(inputs, decoder_inputs, targets).backward()
      optimizer.step()

    for _ in range(3):
      step()
    times = []
    for _ in range(3):
      if device == 'cuda':
        torch.cuda.synchronize()
      start = time.perf_counter()
      for _ in range(num_steps):
        step()
      if device == 'cuda':
        torch.cuda.synchronize()
      times.append((time.perf_counter() - start) / num_steps)
    return statistics.median(times)

  times = {'device': torch.cuda.get_device_name() if device == 'cuda' else 'cpu',
           'eager': seconds_per_step(loss_of)}
  if compiled:
    start = time.perf_counter()
    compiled_loss = torch.compile(loss_of)
    times['compiled'] = seconds_per_step(compiled_loss)
    times['compiled_wall_s'] = time.perf_counter() - start
  return times


def jax_result(shape: str, sizes: dict, dtype: str, num_steps: int) -> dict:
  config = (f'--config=experiments/speed/shapes.py:{shape}' if shape in SHAPES
            else f'--config={shape}')
  output = subprocess.run(
      [sys.executable, '-m', 'transformer_jax.benchmark', config, f'--config.dtype={dtype}',
       f'--batch_size={sizes["batch_size"]}', f'--length={LENGTH}', f'--steps={num_steps}',
       '--json'],
      cwd=checkout.ROOT, check=True, capture_output=True, text=True).stdout
  return json.loads(output.strip().splitlines()[-1])


def compare(shape: str, dtype: str, compiled: bool, num_steps: int) -> dict:
  """One shape's figures: PyTorch's (in a child process) beside transformer_jax's."""
  sizes = sizes_of(shape)
  output = subprocess.run(
      [sys.executable, __file__, '--torch_only', f'--shapes={shape}', f'--dtype={dtype}',
       f'--steps={num_steps}'] + (['--compile'] if compiled else []),
      check=True, capture_output=True, text=True).stdout
  torch_times = json.loads(output.strip().splitlines()[-1])
  ours = jax_result(shape, sizes, dtype, num_steps)
  on_cpu = torch_times['device'] == 'cpu'
  jax_time = ours['step_time_waited_s' if on_cpu else 'step_time_s']
  tokens = sizes['batch_size'] * LENGTH
  peak = ours['matmul_peak_gflops_per_s'] * 1e9
  result = {'device': ours['device'], 'dtype': dtype, 'sizes': sizes,
            'model_flops_per_step': ours['model_flops_per_step'],
            'matmul_peak_gflops_per_s': ours['matmul_peak_gflops_per_s'],
            'jax_step_time_s': jax_time, 'jax_target_tokens_per_s': tokens / jax_time,
            'jax_mfu': ours['model_flops_per_step'] / jax_time / peak}
  for kind in ('eager', 'compiled'):
    if kind in torch_times:
      name = 'torch' if kind == 'eager' else 'torch_compiled'
      result.update({f'{name}_step_time_s': torch_times[kind],
                     f'{name}_target_tokens_per_s': tokens / torch_times[kind],
                     f'{name}_mfu': ours['model_flops_per_step'] / torch_times[kind] / peak,
                     f'speedup_over_{name}': torch_times[kind] / jax_time})
  if compiled:
    result['torch_compile_wall_s'] = torch_times['compiled_wall_s']
  return result


_SHAPES = flags.DEFINE_string('shapes', 'tiny,base', 'Names in experiments/speed/shapes.py or '
                              'config files, comma-separated.')
_DTYPE = flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'], 'Both sides\' dtype.')
_COMPILE = flags.DEFINE_bool('compile', False, 'Also time torch.compile.')
_STEPS = flags.DEFINE_integer('steps', 20, 'Steps a round.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the results to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')
_TORCH_ONLY = flags.DEFINE_bool('torch_only', False, 'Internal: the child process that times '
                                'PyTorch.')


def main(argv):
  del argv
  if _TORCH_ONLY.value:  # the child process that times PyTorch
    print(json.dumps(torch_step_times(sizes_of(_SHAPES.value), _DTYPE.value, _COMPILE.value,
                                      _STEPS.value)))
    return
  import torch
  results = {'provenance': provenance.record(), 'torch_threads': torch.get_num_threads(),
             'shapes': {}}
  for shape in _SHAPES.value.split(','):
    results['shapes'][shape] = r = compare(shape, _DTYPE.value, _COMPILE.value, _STEPS.value)
    compiled = (f', torch.compile {r["torch_compiled_target_tokens_per_s"]:.0f} tok/s '
                f'(MFU {r["torch_compiled_mfu"]:.1%})' if _COMPILE.value else '')
    print(f'{shape}, {_DTYPE.value}: torch {r["torch_target_tokens_per_s"]:.0f} tok/s '
          f'(MFU {r["torch_mfu"]:.1%}){compiled}, transformer_jax '
          f'{r["jax_target_tokens_per_s"]:.0f} tok/s (MFU {r["jax_mfu"]:.1%}), '
          f'speed-up {r["speedup_over_torch"]:.2f}x'
          + (f', {r["speedup_over_torch_compiled"]:.2f}x over torch.compile'
             if _COMPILE.value else ''), flush=True)
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w') as f:
      json.dump(results, f, indent=2)


if __name__ == '__main__':
  app.run(main)
