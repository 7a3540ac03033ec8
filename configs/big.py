r"""The paper's big model (Table 3 last row; §6.1 "Transformer (big)").

  python -m transformer_jax.summary --config=configs/big.py

For EN-FR the big model used P_drop = 0.1 instead of 0.3 (§6.1):
--config.model.dropout_rate=0.1.
"""

import ml_collections

from transformer_jax.config import loading

base = loading.import_sibling(__file__, 'base')

# The big model's changes to the base config (Table 3 last row, §6.1).
DELTA = {
    'model.d_model': 1024,
    'model.d_ff': 4096,
    'model.num_heads': 16,
    'model.dropout_rate': 0.3,
    'train.num_train_steps': 300_000,  # 300K steps (§5.2)
    'decode.average_last': 20,  # §6.1: the big models average the last 20 checkpoints,
    'train.checkpoint_every_steps': 600,  # written every 10 minutes: 600 steps of 1.0 s (§5.2)
}


def get_config() -> ml_collections.ConfigDict:
  config = base.get_config()
  config.update_from_flattened_dict(DELTA)
  return config
