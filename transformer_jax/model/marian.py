"""The Transformer of this package as a Hugging Face `transformers` MarianMT model: the same
network, written in Marian's configuration and parameter names (`export.py` writes them out).

MarianMT implements the paper's architecture: post-norm layers (§3.1), ReLU feed-forward
networks (eq. 2), embeddings multiplied by sqrt(d_model) (§3.4) and shared between encoder,
decoder and output projection, and sinusoid positions with the paper's frequencies (§3.5). The
differences, each resolved exactly or stated:

- Positions: §3.5 puts PE(pos, 2i) = sin and PE(pos, 2i+1) = cos on interleaved dimensions;
  Marian puts the sines of all frequencies first, then the cosines. The permutation
  `MARIAN_ORDER` of the d_model dimensions maps one table onto the other. Applied to every
  parameter axis of size d_model (embedding columns, the inputs of W^Q, W^K, W^V and W_1, the
  outputs of W^O and W_2, layer-norm gains and biases), it leaves the network's function
  unchanged: layer normalisation and dot products do not depend on the order of dimensions.
- Biases: Marian's projections all have biases; where ours have none (W^Q, W^K, W^V, W^O
  without `model.attention_bias`), they are zeros.
- The decoder's start symbol: both start from the padding id. With `model.decoder_start`
  'zero' (tensor2tensor's) it is embedded as zeros; in Marian the input embedding of the padding
  id is its row of the matrix, so that row is written as zeros, and the output projection, whose
  padding row is not zero in ours, becomes a separate matrix (`tie_word_embeddings` false) so that
  every logit stays the same. With 'learned' the one matrix is shared by all three roles.
- Token ids: Opus-MT models, and the converters that read them (CTranslate2's), have `<pad>`
  as the last id; ours is 0. The export renumbers the vocabulary, `marian_id`: ours less one,
  `<pad>` last (eos 0, unk 1). Every vocabulary axis (embedding rows, output rows) is permuted
  the same way, so the logits are ours in Marian's order; `translate` keeps our ids.
- Layer-norm ε: ours is 1e-6 (tensor2tensor's), Marian's torch.nn.LayerNorm default 1e-5,
  which its configuration cannot change. This is the one difference that is not exact; its
  effect on the logits is measured in `tests/test_export.py` and experiments/hf_export/README.md.

Options Marian does not have are refused by `check_exportable`, naming the config field.
"""

from typing import Any

import jax
import numpy as np

from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.model.model_config import TransformerConfig


def marian_id(our_id, vocab_size: int):
  """Marian's id of our token id: ours less one, `<pad>` (our 0) last (module docstring)."""
  return (np.asarray(our_id) - 1) % vocab_size


def our_ids(vocab_size: int) -> np.ndarray:
  """Our id of each of Marian's ids, in order: the rows of a vocabulary axis as Marian has
  them (`marian_id`'s inverse)."""
  return (np.arange(vocab_size) + 1) % vocab_size


def marian_order(d_model: int) -> np.ndarray:
  """The permutation of the d_model dimensions from §3.5's layout to Marian's: Marian's
  dimension m is our dimension `marian_order(d_model)[m]`, the sines (our even dimensions)
  first, then the cosines (our odd ones)."""
  return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def check_exportable(cfg: TransformerConfig) -> None:
  """A ValueError naming every field of `cfg` that MarianMT cannot express."""
  reasons = []
  fixed = {'norm_position': 'post', 'norm_type': 'layer_norm', 'position_encoding': 'sinusoid',
           'fixnorm': False}
  for field, marian in fixed.items():
    if getattr(cfg, field) != marian:
      reasons.append(f'config.model.{field}={getattr(cfg, field)!r}: Marian has only '
                     f'{marian!r}')
  for field in ('d_k', 'd_v'):
    if getattr(cfg, field) * cfg.num_heads != cfg.d_model:
      reasons.append(f'config.model.{field}={getattr(cfg, field)} is not d_model / num_heads = '
                     f'{cfg.d_model / cfg.num_heads:g}: Marian\'s heads are d_model / h wide')
  if cfg.drophead_rate:
    reasons.append(f'config.model.drophead_rate={cfg.drophead_rate}: Marian has no DropHead, '
                   'so training the exported model further would differ')
  if reasons:
    raise ValueError('cannot export to MarianMT: ' + '; '.join(reasons))


def one_matrix(cfg: TransformerConfig) -> bool:
  """Whether the exported model keeps one embedding matrix for the source and target inputs and
  the output projection (Marian's `share_encoder_decoder_embeddings` and `tie_word_embeddings`).
  Not when the start symbol is embedded as zeros, whose output row is not (module docstring), nor
  with `share_embeddings` off: then the encoder, decoder and output projection each get their
  own matrix, as `transformers` ties all three or none."""
  return cfg.share_embeddings and cfg.decoder_start == 'learned'


def marian_config(cfg: TransformerConfig) -> dict[str, Any]:
  """The keyword arguments of `transformers.MarianConfig` for the network of `cfg`."""
  check_exportable(cfg)
  return dict(
      vocab_size=cfg.vocab_size,
      decoder_vocab_size=cfg.vocab_size,
      max_position_embeddings=cfg.max_len,
      d_model=cfg.d_model,
      encoder_layers=cfg.num_layers,
      decoder_layers=cfg.num_layers,
      encoder_ffn_dim=cfg.d_ff,
      decoder_ffn_dim=cfg.d_ff,
      encoder_attention_heads=cfg.num_heads,
      decoder_attention_heads=cfg.num_heads,
      activation_function='relu',
      scale_embedding=True,
      dropout=cfg.dropout_rate,
      attention_dropout=cfg.attention_dropout_rate,
      activation_dropout=cfg.relu_dropout_rate,
      encoder_layerdrop=cfg.layerdrop_rate,
      decoder_layerdrop=cfg.layerdrop_rate,
      init_std=cfg.d_model**-0.5,
      share_encoder_decoder_embeddings=one_matrix(cfg),
      tie_word_embeddings=one_matrix(cfg),
      pad_token_id=int(marian_id(PAD_ID, cfg.vocab_size)),
      eos_token_id=int(marian_id(EOS_ID, cfg.vocab_size)),
      decoder_start_token_id=int(marian_id(PAD_ID, cfg.vocab_size)),
      forced_eos_token_id=None,
      bos_token_id=None,
  )


def _attention(params: dict, prefix: str, order: np.ndarray) -> dict[str, np.ndarray]:
  """One attention's W^Q, W^K, W^V (d_model, h, d) and W^O (h, d_v, d_model) as Marian's
  torch Linear weights (out, in) and biases."""
  weights = {}
  for ours, theirs in (('query', 'q_proj'), ('key', 'k_proj'), ('value', 'v_proj')):
    kernel = params[ours]['kernel']
    weights[f'{prefix}.{theirs}.weight'] = kernel.reshape(kernel.shape[0], -1)[order].T
    bias = params[ours].get('bias', np.zeros(kernel.shape[1:], kernel.dtype))
    weights[f'{prefix}.{theirs}.bias'] = bias.reshape(-1)
  kernel = params['out']['kernel']
  weights[f'{prefix}.out_proj.weight'] = kernel.reshape(-1, kernel.shape[-1])[:, order].T
  weights[f'{prefix}.out_proj.bias'] = params['out'].get(
      'bias', np.zeros(kernel.shape[-1:], kernel.dtype))[order]
  return weights


def _layer(params: dict, prefix: str, order: np.ndarray, decoder: bool) -> dict[str, np.ndarray]:
  """One encoder or decoder layer's parameters under Marian's names."""
  sublayers = [('self_attention', 'self_attn')]
  if decoder:
    sublayers.append(('encoder_attention', 'encoder_attn'))
  weights = {}
  for ours, theirs in sublayers:
    weights.update(_attention(params[ours], f'{prefix}.{theirs}', order))
    norm = params[f'{ours}_norm']
    weights[f'{prefix}.{theirs}_layer_norm.weight'] = norm['scale'][order]
    weights[f'{prefix}.{theirs}_layer_norm.bias'] = norm['bias'][order]
  ffn = params['ffn']
  weights[f'{prefix}.fc1.weight'] = ffn['inner']['kernel'][order].T
  weights[f'{prefix}.fc1.bias'] = ffn['inner']['bias']
  weights[f'{prefix}.fc2.weight'] = ffn['outer']['kernel'][:, order].T
  weights[f'{prefix}.fc2.bias'] = ffn['outer']['bias'][order]
  weights[f'{prefix}.final_layer_norm.weight'] = params['ffn_norm']['scale'][order]
  weights[f'{prefix}.final_layer_norm.bias'] = params['ffn_norm']['bias'][order]
  return weights


def marian_weights(cfg: TransformerConfig, params: Any) -> dict[str, np.ndarray]:
  """The parameters of `Transformer(cfg)` as a MarianMTModel state dict of float32 numpy arrays
  (contiguous, as safetensors stores them)."""
  check_exportable(cfg)
  params = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
  order = marian_order(cfg.d_model)
  tables = params['embeddings']
  rows = our_ids(cfg.vocab_size)
  table = lambda role: tables['shared' if cfg.share_embeddings else role][rows][:, order]
  if one_matrix(cfg):
    weights = {'model.shared.weight': table('shared')}
  else:
    weights = {'model.encoder.embed_tokens.weight': _input_embedding(cfg, table('source')),
               'model.decoder.embed_tokens.weight': _input_embedding(cfg, table('target')),
               'lm_head.weight': table('output')}
  weights['final_logits_bias'] = np.zeros((1, cfg.vocab_size), np.float32)
  for stack in ('encoder', 'decoder'):
    for i in range(cfg.num_layers):
      weights.update(_layer(params[stack][f'layer_{i}'], f'model.{stack}.layers.{i}', order,
                            stack == 'decoder'))
  return {name: np.ascontiguousarray(value, np.float32) for name, value in weights.items()}


def _input_embedding(cfg: TransformerConfig, table: np.ndarray) -> np.ndarray:
  """An input embedding matrix (rows in Marian's order) as Marian reads it: with
  `decoder_start` 'zero' the padding id (also the start symbol) embeds to zeros, as
  `Embeddings.embed` makes it."""
  if cfg.decoder_start == 'zero':
    table = table.copy()
    table[marian_id(PAD_ID, cfg.vocab_size)] = 0
  return table

