"""An independent float64 numpy Transformer, written from the paper's equations.

It reads the Flax parameter tree (converted to float64 numpy) but shares no code with the
package: attention is computed head by head with explicit matrices W_i^Q, W_i^K, W_i^V.
"""

import numpy as np


def as_numpy(tree):
  """Flax params -> nested dicts of float64 numpy arrays."""
  if isinstance(tree, dict):
    return {k: as_numpy(v) for k, v in tree.items()}
  return np.asarray(tree, np.float64)


def softmax(x):
  x = x - x.max(axis=-1, keepdims=True)
  e = np.exp(x)
  return e / e.sum(axis=-1, keepdims=True)


def layer_norm(x, p, eps=1e-6):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * p['scale'] + p['bias']


def scale_norm(x, p, eps=1e-5):
  return p['scale'] * x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


def multi_head_attention(p, xq, xkv, mask, weights=None):
  """MultiHead(Q,K,V) = Concat(head_1..head_h) W^O, head_i = softmax(QW_i^Q (KW_i^K)^T/sqrt(d_k)) VW_i^V.

  xq: (q, d_model); xkv: (k, d_model); mask: (q, k) bool; p: kernels as stored by the model,
  query/key/value (d_model, h, d), out (h, d_v, d_model), and biases (h, d) and (d_model,) if
  the model has them. `weights`, if a list, receives each head's (q, k) attention weights.
  """
  num_heads = p['query']['kernel'].shape[1]

  def bias(name, head=None):  # present with attention_bias: (h, d) or (d_model,)
    if 'bias' not in p[name]:
      return 0.0
    return p[name]['bias'] if head is None else p[name]['bias'][head]

  heads = []
  for i in range(num_heads):
    w_q = p['query']['kernel'][:, i, :]
    w_k = p['key']['kernel'][:, i, :]
    w_v = p['value']['kernel'][:, i, :]
    q = xq @ w_q + bias('query', i)
    k = xkv @ w_k + bias('key', i)
    v = xkv @ w_v + bias('value', i)
    scores = q @ k.T / np.sqrt(w_k.shape[1])
    scores = np.where(mask, scores, -np.inf)
    heads.append(softmax(scores) @ v)
    if weights is not None:
      weights.append(softmax(scores))
  w_o = p['out']['kernel'].reshape(-1, p['out']['kernel'].shape[-1])  # (h·d_v, d_model)
  return np.concatenate(heads, axis=-1) @ w_o + bias('out')


def feed_forward(p, x):
  h = np.maximum(0.0, x @ p['inner']['kernel'] + p['inner']['bias'])
  return h @ p['outer']['kernel'] + p['outer']['bias']


def sinusoid(length, d_model):
  pe = np.zeros((length, d_model))
  for pos in range(length):
    for j in range(d_model):
      i = j // 2
      angle = pos / 10000 ** (2 * i / d_model)
      pe[pos, j] = np.sin(angle) if j % 2 == 0 else np.cos(angle)
  return pe


class Reference:
  """transformer(inputs, decoder_inputs) for one example, with the model's options. After a
  call, `attention[(stack, layer, name)]` holds each head's (q, k) attention weights."""

  def __init__(self, params, num_layers, pre_norm=False, norm='layer_norm', fixnorm=False,
               decoder_start='zero'):
    self.p = as_numpy(params)
    self.zero_padding_embedding = decoder_start == 'zero'
    self.num_layers = num_layers
    self.attention = {}
    self.pre_norm = pre_norm
    self.norm = layer_norm if norm == 'layer_norm' else scale_norm
    embeddings = self.p['embeddings']
    self.tables = {role: embeddings.get('shared', embeddings.get(role))
                   for role in ('source', 'target', 'output')}
    if fixnorm:
      self.tables = {r: t / np.linalg.norm(t, axis=-1, keepdims=True)
                     for r, t in self.tables.items()}

  def sublayer(self, x, fn, norm_params):
    if self.pre_norm:
      return x + fn(self.norm(x, norm_params))
    return self.norm(x + fn(x), norm_params)

  def embed(self, tokens, role, position_params):
    d_model = self.tables[role].shape[1]
    x = self.tables[role][tokens] * np.sqrt(d_model)
    if self.zero_padding_embedding:  # id 0, the start symbol, embeds to zeros
      x = x * (tokens != 0)[:, None]
    if position_params is not None:
      return x + position_params['embedding'][: len(tokens)]
    return x + sinusoid(len(tokens), d_model)

  def encode(self, inputs, source_mask, skip_layers=()):
    p = self.p['encoder']
    x = self.embed(inputs, 'source', p.get('position'))
    mask = np.broadcast_to(source_mask[None, :], (len(inputs), len(inputs)))
    for n in range(self.num_layers):
      if n in skip_layers:
        continue
      lp = p[f'layer_{n}']
      record = self.attention.setdefault(('encoder', n, 'self_attention'), [])
      x = self.sublayer(x, lambda y: multi_head_attention(lp['self_attention'], y, y, mask,
                                                          record), lp['self_attention_norm'])
      x = self.sublayer(x, lambda y: feed_forward(lp['ffn'], y), lp['ffn_norm'])
    return self.norm(x, p['final_norm']) if self.pre_norm else x

  def decode(self, encoded, source_mask, decoder_inputs, skip_layers=()):
    p = self.p['decoder']
    t = len(decoder_inputs)
    y = self.embed(decoder_inputs, 'target', p.get('position'))
    causal = np.tril(np.ones((t, t), bool))
    memory_mask = np.broadcast_to(source_mask[None, :], (t, len(source_mask)))
    for n in range(self.num_layers):
      if n in skip_layers:
        continue
      lp = p[f'layer_{n}']
      record = self.attention.setdefault(('decoder', n, 'self_attention'), [])
      y = self.sublayer(y, lambda z: multi_head_attention(lp['self_attention'], z, z, causal,
                                                          record), lp['self_attention_norm'])
      record = self.attention.setdefault(('decoder', n, 'encoder_attention'), [])
      y = self.sublayer(
          y, lambda z: multi_head_attention(lp['encoder_attention'], z, encoded, memory_mask,
                                            record), lp['encoder_attention_norm'])
      y = self.sublayer(y, lambda z: feed_forward(lp['ffn'], z), lp['ffn_norm'])
    if self.pre_norm:
      y = self.norm(y, p['final_norm'])
    return y @ self.tables['output'].T

  def __call__(self, inputs, decoder_inputs, skip_encoder=(), skip_decoder=()):
    source_mask = inputs != 0
    encoded = self.encode(inputs, source_mask, skip_encoder)
    return self.decode(encoded, source_mask, decoder_inputs, skip_decoder)


def adam_updates(gradients, learning_rates, b1=0.9, b2=0.98, eps=1e-9):
  """Adam (Kingma & Ba, Algorithm 1) as §5.3 uses it, in float64: the update of each step from
  a sequence of gradients (arrays of one shape) and the learning rate of each step."""
  m = v = 0.0
  updates = []
  for t, (g, lr) in enumerate(zip(gradients, learning_rates), start=1):
    g = np.asarray(g, np.float64)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
    updates.append(-lr * m_hat / (np.sqrt(v_hat) + eps))
  return updates
