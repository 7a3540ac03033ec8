r"""What the Q/K/V initialisation changes at step 0, for post-norm and pre-norm.

  python experiments/postnorm/init.py

For configs/multi30k.py's model with each norm position and Q/K/V initialisation, over three
initialisation seeds, on random token ids (at initialisation every embedding row is an iid
draw, so real sentences would give the same statistics up to noise):
  cos(encoder out, embedding)  how much of each source token's own embedding is left at the top
                               of the encoder (mean cosine similarity over the tokens);
  cos(decoder out, embedding)  the same for the decoder's last hidden state and its input token;
  logit std                    the standard deviation of the scaled scores QK^T/sqrt(d_k) of the
                               first encoder self-attention.
Results: experiments/postnorm/README.md. Runs in about 8 s on a 2-core CPU.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.config import checks, loading
from transformer_jax.model import model_config
from transformer_jax.model.transformer import Transformer

multi30k = loading.import_sibling(__file__, '../../configs/multi30k')


def cosine(a: jax.Array, b: jax.Array) -> float:
  return float(jnp.mean(jnp.sum(a * b, -1) / jnp.linalg.norm(a, axis=-1)
                        / jnp.linalg.norm(b, axis=-1)))


def statistics(norm_position: str, qkv_init: str, seed: int) -> dict:
  config = multi30k.get_config()
  config.model.norm_position, config.model.qkv_init, config.seed = norm_position, qkv_init, seed
  checks.validate(config)  # the choices set here enter the config
  module = Transformer(model_config.from_config(config).replace(deterministic=True))
  rng = np.random.default_rng(seed)
  inputs = jnp.asarray(rng.integers(3, config.data.vocab_size, (64, 20)), jnp.int32)
  targets = jnp.asarray(rng.integers(3, config.data.vocab_size, (64, 20)), jnp.int32)
  variables = nn.unbox(module.init(jax.random.key(seed), inputs, targets))
  params = variables['params']
  table = params['embeddings']['shared']
  mask = inputs != 0
  encoded = module.apply(variables, inputs, mask, method='encode')
  # The decoder's last hidden state: the logits before the shared projection are y E^T, so
  # recover y by capturing the output of the decoder's last sub-layer normalisation.
  _, state = module.apply(variables, encoded, mask, targets, method='decode',
                         capture_intermediates=True)
  decoder = state['intermediates']['decoder']
  last = decoder['final_norm' if norm_position == 'pre' else f'layer_{config.model.num_layers - 1}']
  hidden = last['__call__'][0]
  attention = params['encoder']['layer_0']['self_attention']
  x = table[inputs] * config.model.d_model**0.5  # the first layer's input, up to positions
  query = jnp.einsum('bsd,dhk->bhsk', x, attention['query']['kernel'])
  key = jnp.einsum('bsd,dhk->bhsk', x, attention['key']['kernel'])
  scores = jnp.einsum('bhqk,bhsk->bhqs', query, key) / config.model.d_k**0.5
  return {'cos(encoder out, embedding)': cosine(encoded, table[inputs]),
          'cos(decoder out, embedding)': cosine(hidden, table[targets]),
          'logit std': float(jnp.std(scores))}


def main():
  print('| norm | W^Q, W^K, W^V init | cos(encoder out, embedding) | cos(decoder out, embedding) '
        '| logit std |\n|---|---|---|---|---|')
  for norm_position in ('post', 'pre'):
    for qkv_init in ('separate', 'fused'):
      seeds = [statistics(norm_position, qkv_init, seed) for seed in range(3)]
      cells = [f'{np.mean([s[name] for s in seeds]):.3f} ± {np.std([s[name] for s in seeds]):.3f}'
               for name in seeds[0]]
      print(f'| {norm_position} | {qkv_init} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
  main()
