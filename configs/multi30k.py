r"""Multi30k task 1, English->German: a small Transformer for real data at CPU scale.

  python -m transformer_jax.data --config=configs/multi30k.py \
      --config.data.manual_dir=../shared/data/multi30k --inspect

Without manual_dir the raw files are downloaded from the Multi30k repository. The model
follows the published text-only Multi30k baseline's scale (small d_model, strong dropout).
"""

import ml_collections

from configs import base


def get_config() -> ml_collections.ConfigDict:
  config = base.get_config()
  config.update_from_flattened_dict({
      'data.dataset': 'multi30k',
      'data.vocab_size': 6000,  # joint BPE over 29k sentence pairs
      'data.max_length': 128,  # Multi30k's longest training pair has ~100 tokens
      'data.tokens_per_batch': 4096,
      'model.num_layers': 4,
      'model.d_model': 256,
      'model.d_ff': 1024,
      'model.num_heads': 4,
      'model.d_k': 64,
      'model.d_v': 64,
      'model.dropout_rate': 0.3,
  })
  return config
