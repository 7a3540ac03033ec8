r"""The two shapes at which training throughput is compared with PyTorch (see
`experiments/speed/torch_baseline.py`): float32, dropout 0.1, source and target length 32.

  python -m transformer_jax.benchmark --config=experiments/speed/shapes.py:tiny \
      --batch_size=64 --length=32

  tiny: d_model 256, 4 heads, d_ff 1024, 3+3 layers, vocab 8000, batch 64
  base: d_model 512, 8 heads, d_ff 2048, 6+6 layers, vocab 8000, batch 32
"""

import ml_collections

from transformer_jax.config import loading

base = loading.import_sibling(__file__, '../../configs/base')

SHAPES = {
    'tiny': dict(num_layers=3, d_model=256, num_heads=4, d_ff=1024, batch_size=64),
    'base': dict(num_layers=6, d_model=512, num_heads=8, d_ff=2048, batch_size=32),
}
VOCAB_SIZE = 8000
LENGTH = 32


def get_config(shape: str) -> ml_collections.ConfigDict:
  sizes = SHAPES[shape]
  config = base.get_config()
  config.update_from_flattened_dict({
      'data.vocab_size': VOCAB_SIZE,
      'model.num_layers': sizes['num_layers'],
      'model.d_model': sizes['d_model'],
      'model.num_heads': sizes['num_heads'],
      'model.d_k': sizes['d_model'] // sizes['num_heads'],
      'model.d_v': sizes['d_model'] // sizes['num_heads'],
      'model.d_ff': sizes['d_ff'],
      'model.dropout_rate': 0.1,
      # The whole logits, as PyTorch computes them and as the committed figures were measured.
      'train.loss_chunk': 0,
  })
  return config
