r"""Training throughput of transformer_jax against PyTorch's eager nn.Transformer, same shapes.

  pip install torch==2.13.0   # CPU wheel; not a dependency of the package
  python experiments/torch_baseline.py [--shapes=tiny,base] [--steps=20] [--json=FILE]

For each shape of `experiments/benchmark_shapes.py` it times, one after the other in fresh
processes so they never share the CPU, (1) a PyTorch training step: shared embedding scaled by
sqrt(d_model) plus sinusoids, `nn.Transformer` (post-norm, ReLU, dropout 0.1), tied output
projection, label-smoothed cross entropy (0.1), Adam (0.9, 0.98, 1e-9); and (2)
`python -m transformer_jax.benchmark` on the same config. Both report the median step time of
`--steps` steps after 3 warm-up steps, each step waited for, on random tokens.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from experiments.benchmark_shapes import LENGTH, SHAPES, VOCAB_SIZE  # noqa: E402


def torch_step_time(shape: str, num_steps: int) -> float:
  import torch  # only this function needs PyTorch

  sizes = SHAPES[shape]
  d_model, batch = sizes['d_model'], sizes['batch_size']
  torch.manual_seed(0)

  class Model(torch.nn.Module):

    def __init__(self):
      super().__init__()
      self.embedding = torch.nn.Embedding(VOCAB_SIZE, d_model, padding_idx=0)
      self.transformer = torch.nn.Transformer(
          d_model, sizes['num_heads'], sizes['num_layers'], sizes['num_layers'], sizes['d_ff'],
          dropout=0.1, batch_first=True)
      self.dropout = torch.nn.Dropout(0.1)
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

  model = Model()
  optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
  loss_fn = torch.nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1)
  inputs = torch.randint(1, VOCAB_SIZE, (batch, LENGTH))
  targets = torch.randint(1, VOCAB_SIZE, (batch, LENGTH))
  decoder_inputs = torch.nn.functional.pad(targets[:, :-1], (1, 0))

  def step():
    optimizer.zero_grad(set_to_none=True)
    logits = model(inputs, decoder_inputs)
    loss = loss_fn(logits.reshape(-1, VOCAB_SIZE), targets.reshape(-1))
    loss.backward()
    optimizer.step()

  for _ in range(3):
    step()
  times = []
  for _ in range(num_steps):
    start = time.perf_counter()
    step()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def jax_result(shape: str, num_steps: int) -> dict:
  output = subprocess.run(
      [sys.executable, '-m', 'transformer_jax.benchmark',
       f'--config=experiments/benchmark_shapes.py:{shape}',
       f'--batch_size={SHAPES[shape]["batch_size"]}', f'--length={LENGTH}',
       f'--steps={num_steps}', '--json'],
      cwd=REPO, check=True, capture_output=True, text=True).stdout
  return json.loads(output.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--shapes', default='tiny,base')
  parser.add_argument('--steps', type=int, default=20)
  parser.add_argument('--json', help='Also write the results to this file.')
  parser.add_argument('--torch_only', action='store_true', help=argparse.SUPPRESS)
  parser.add_argument('--shape', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.torch_only:  # the child process that times PyTorch
    print(json.dumps({'step_time_s': torch_step_time(args.shape, args.steps)}))
    return
  import torch
  results = {'torch_version': torch.__version__, 'torch_threads': torch.get_num_threads(),
             'shapes': {}}
  for shape in args.shapes.split(','):
    output = subprocess.run(
        [sys.executable, __file__, '--torch_only', f'--shape={shape}', f'--steps={args.steps}'],
        check=True, capture_output=True, text=True).stdout
    torch_time = json.loads(output.strip().splitlines()[-1])['step_time_s']
    ours = jax_result(shape, args.steps)
    # Each step waited for, as PyTorch's eager steps are; MFU against the benchmark's peak
    # (timed back to back).
    jax_time = ours['step_time_waited_s']
    tokens = SHAPES[shape]['batch_size'] * LENGTH
    results['shapes'][shape] = {
        'torch_step_time_s': torch_time,
        'torch_target_tokens_per_s': tokens / torch_time,
        'jax_step_time_s': jax_time,
        'jax_target_tokens_per_s': tokens / jax_time,
        'jax_mfu': (ours['model_flops_per_step'] / jax_time
                    / (ours['matmul_peak_gflops_per_s'] * 1e9)),
        'speedup': torch_time / jax_time,
    }
    r = results['shapes'][shape]
    print(f'{shape}: torch {r["torch_target_tokens_per_s"]:.0f} tok/s, transformer_jax '
          f'{r["jax_target_tokens_per_s"]:.0f} tok/s (MFU {r["jax_mfu"]:.1%}), '
          f'speed-up {r["speedup"]:.2f}x', flush=True)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(results, f, indent=2)


if __name__ == '__main__':
  main()
