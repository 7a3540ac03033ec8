r"""What the heads attend to, for one sentence: the pictures of the paper's Figures 3-5.

  python -m transformer_jax.visualize --workdir=DIR --source="A man is sleeping ." \
      [--target="Ein Mann schläft ."] [--output=DIR/attention] [--token=PIECE] [--json]

The workdir's model (its last `config.decode.average_last` checkpoints averaged, as `translate`
uses it) reads the source and the target (given, or its own translation with `config.decode`),
with teacher forcing and no dropout, and every layer's attention weights softmax(QK^T/sqrt(d_k))
(eq. 1) are collected for the three kinds of attention (§3.2.3): encoder self-attention,
decoder (masked) self-attention and encoder-decoder attention. Written to --output:
  <kind>_layer<n>.png  one heat map per head, word pieces on both axes;
  lines_<kind>_layer<n>.png  the paper's Figure 3 style: lines from one query token to every
      key it attends to, one colour per head, opacity = weight. The query is the first word
      piece equal to --token (without SentencePiece's '▁'; e.g. --token=him for an anaphor, as
      Figure 4), in the kinds whose queries have it; otherwise the query whose heads look
      farthest from their own position;
  attention.html  one self-contained page (no network) to browse kinds, layers and heads.
  attention.json  with --json, the tokens and weights, for notebooks. Source tokens end with </s>; a decoder
position is labelled with the token it predicts (the target's word pieces, then </s>).
"""

import html
import json
import os
from typing import Any

from absl import flags
import jax
import matplotlib
import numpy as np

from transformer_jax import cli
from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.decoding.translator import Translator
from transformer_jax.model.transformer import Transformer
from transformer_jax.storage import atomic

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

# (stack, attention module name) of each kind of attention (§3.2.3).
KINDS = {'encoder_self': ('encoder', 'self_attention'),
         'decoder_self': ('decoder', 'self_attention'),
         'encoder_decoder': ('decoder', 'encoder_attention')}


def attention_weights(module: Transformer, params: Any, inputs: np.ndarray,
                      targets: np.ndarray) -> dict[str, np.ndarray]:
  """{kind: (layers, heads, queries, keys)} weights of one sentence pair.

  Args:
    module: a deterministic Transformer (dropout off).
    params: its parameters.
    inputs: (s,) source ids, EOS-terminated, no padding.
    targets: (t,) target ids, EOS-terminated; the decoder reads them shifted right.
  """
  decoder_inputs = np.concatenate([[PAD_ID], targets[:-1]]).astype(np.int32)
  _, state = module.apply({'params': params}, inputs[None].astype(np.int32), decoder_inputs[None],
                         mutable=['intermediates'])
  sown = jax.device_get(state['intermediates'])
  weights = {}
  for kind, (stack, name) in KINDS.items():
    layers = [sown[stack][f'layer_{n}'][name]['attention_weights'][0][0]
              for n in range(module.config.num_layers)]
    weights[kind] = np.stack(layers).astype(np.float64)
  return weights


def _pieces(translator: Translator, ids: np.ndarray) -> list[str]:
  return ['</s>' if i == EOS_ID else translator.tokenizer.id_to_piece(int(i)) for i in ids]


def collect(translator: Translator, source: str, target: str | None) -> dict:
  """Tokens and weights of one sentence (and its translation if `target` is None)."""
  if not source.strip():
    raise ValueError('--source is empty')
  [inputs] = translator.encode([source], '--source', truncate=False)
  if target is None:
    [ids] = translator.translate_ids([inputs])
    target = translator.text(ids)
    targets = np.append(ids, EOS_ID)
  else:
    [targets] = translator.encode([target], '--target', side='target', truncate=False)
  weights = attention_weights(translator.model.eval_module, translator.params, inputs, targets)
  return {'source': source, 'target': target, 'checkpoint_steps': translator.steps,
          'source_tokens': _pieces(translator, inputs),
          'target_tokens': _pieces(translator, targets), 'weights': weights}


def _axes_tokens(result: dict, kind: str) -> tuple[list[str], list[str]]:
  """(query tokens, key tokens) of a kind."""
  source, target = result['source_tokens'], result['target_tokens']
  return {'encoder_self': (source, source), 'decoder_self': (target, target),
          'encoder_decoder': (target, source)}[kind]


def farthest_query(weights: np.ndarray) -> int:
  """The query whose heads attend farthest from its own position on average: (h, q, k)."""
  queries, keys = weights.shape[1:]
  distance = np.abs(np.arange(queries)[:, None] * (keys / queries) - np.arange(keys)[None, :])
  return int(np.argmax((weights * distance).sum(-1).mean(0)))


def head_grid(weights: np.ndarray, queries: list[str], keys: list[str], title: str):
  """One heat map per head of (h, q, k) weights."""
  heads = weights.shape[0]
  columns = min(heads, 4)
  rows = -(-heads // columns)
  size = 0.25 * max(len(queries), len(keys)) + 1.5
  figure, axes = plt.subplots(rows, columns, figsize=(columns * size, rows * size),
                              squeeze=False)
  for head, ax in enumerate(axes.flat):
    if head >= heads:
      ax.axis('off')
      continue
    ax.imshow(weights[head], cmap='viridis', vmin=0, vmax=1)
    ax.set_title(f'head {head}', fontsize=9)
    ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=7)
    ax.set_yticks(range(len(queries)), queries, fontsize=7)
  figure.suptitle(title)
  figure.tight_layout()
  return figure


def lines(weights: np.ndarray, queries: list[str], keys: list[str], query: int, title: str):
  """The paper's Figure 3: the query tokens on top, the key tokens below, a line from the chosen
  query to every key per head (one colour per head, opacity = weight)."""
  figure, ax = plt.subplots(figsize=(max(6, 0.6 * max(len(queries), len(keys))), 3))
  colours = plt.get_cmap('tab10' if weights.shape[0] <= 10 else 'tab20')
  for head in range(weights.shape[0]):
    for key in range(len(keys)):
      ax.plot([query, key], [1, 0], color=colours(head % colours.N), linewidth=2,
              alpha=float(weights[head, query, key]))
  for i, token in enumerate(queries):
    ax.text(i, 1.05, token, ha='center', va='bottom', rotation=90, fontsize=8,
            fontweight='bold' if i == query else 'normal')
  for i, token in enumerate(keys):
    ax.text(i, -0.05, token, ha='center', va='top', rotation=90, fontsize=8)
  ax.set_xlim(-1, max(len(queries), len(keys)))
  ax.set_ylim(-0.6, 1.6)
  ax.axis('off')
  ax.set_title(title)
  figure.tight_layout()
  return figure


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>attention: {title}</title>
<style>body{{font-family:sans-serif}} td{{width:1.4em;height:1.4em}}
th{{font-weight:normal;font-size:80%}} .k{{writing-mode:vertical-rl}}</style></head>
<body><h3>{title}</h3>
<p>Checkpoints {steps} averaged. Rows: queries; columns: keys; darker = more weight.</p>
<select id="kind"></select> layer <select id="layer"></select>
head <select id="head"></select><div id="view"></div>
<script>
const data = {data};
const pick = (id, values) => {{ const s = document.getElementById(id); s.innerHTML = '';
  values.forEach(v => s.add(new Option(v, v))); s.onchange = draw; }};
pick('kind', Object.keys(data.weights));
pick('layer', data.weights.encoder_self.map((_, i) => i));
pick('head', data.weights.encoder_self[0].map((_, i) => i));
function draw() {{
  const kind = document.getElementById('kind').value;
  const w = data.weights[kind][document.getElementById('layer').value]
      [document.getElementById('head').value];
  const [q, k] = data.axes[kind];
  let t = '<table><tr><th></th>' + k.map(x => '<th class="k">' + x + '</th>').join('') + '</tr>';
  w.forEach((row, i) => {{ t += '<tr><th>' + q[i] + '</th>' + row.map(v =>
      '<td title="' + v.toFixed(3) + '" style="background:rgba(20,60,160,' + v + ')"></td>')
      .join('') + '</tr>'; }});
  document.getElementById('view').innerHTML = t;
}}
draw();
</script></body></html>
"""


def _find(tokens: list[str], piece: str | None) -> int | None:
  matches = [i for i, token in enumerate(tokens) if token.lstrip('▁') == piece]
  return matches[0] if matches else None


def write(result: dict, directory: str, token: str | None = None) -> list[str]:
  """Every PNG and the HTML page into `directory`; returns their paths. `token`: the word
  piece whose attention the line pictures show, where it is a query."""
  if token is not None and all(_find(_axes_tokens(result, kind)[0], token) is None
                               for kind in KINDS):
    raise ValueError(f'--token={token}: no such word piece in '
                     f'{result["source_tokens"] + result["target_tokens"]}')
  os.makedirs(directory, exist_ok=True)
  paths = []
  for kind, weights in result['weights'].items():
    queries, keys = _axes_tokens(result, kind)
    for layer, layer_weights in enumerate(weights):
      query = _find(queries, token)
      if query is None:
        query = farthest_query(layer_weights)
      for name, figure in (
          (f'{kind}_layer{layer}.png', head_grid(layer_weights, queries, keys,
                                                  f'{kind} attention, layer {layer}')),
          (f'lines_{kind}_layer{layer}.png', lines(layer_weights, queries, keys, query,
                                                   f'{kind} attention, layer {layer}: '
                                                   f'{queries[query]!r}'))):
        paths.append(os.path.join(directory, name))
        with atomic.replacing(paths[-1]) as temporary:
          figure.savefig(temporary, dpi=100, format='png')
        plt.close(figure)
  page = {'weights': {kind: np.round(w, 4).tolist() for kind, w in result['weights'].items()},
          'axes': {kind: [[html.escape(t) for t in axis] for axis in _axes_tokens(result, kind)]
                   for kind in KINDS}}
  paths.append(os.path.join(directory, 'attention.html'))
  atomic.write(paths[-1], _PAGE.format(
      title=html.escape(f'{result["source"]} → {result["target"]}'),
      steps=result['checkpoint_steps'], data=json.dumps(page)))
  return paths


def as_json(result: dict) -> str:
  return json.dumps({**result, 'weights': {kind: w.tolist()
                                           for kind, w in result['weights'].items()}})


if __name__ == '__main__':
  _WORKDIR = flags.DEFINE_string('workdir', None, 'A training run\'s directory.', required=True)
  _SOURCE = flags.DEFINE_string('source', None, 'The source sentence.', required=True)
  _TARGET = flags.DEFINE_string('target', None, 'Its target (default: the model\'s translation).')
  _OUTPUT = flags.DEFINE_string('output', None, 'Where the pictures go (default: '
                                'WORKDIR/attention).')
  _TOKEN = flags.DEFINE_string('token', None, 'The word piece whose attention the line pictures '
                               'show (default: the one looking farthest away).')
  _JSON = flags.DEFINE_bool('json', False, 'Also write the tokens and weights as JSON, to '
                            'OUTPUT/attention.json.')

  def main():
    if not os.path.isdir(_WORKDIR.value):
      raise FileNotFoundError(f'--workdir={_WORKDIR.value}: no such directory')
    result = collect(Translator(_WORKDIR.value), _SOURCE.value, _TARGET.value)
    output = _OUTPUT.value or os.path.join(_WORKDIR.value, 'attention')
    paths = write(result, output, _TOKEN.value)
    if _JSON.value:
      atomic.write(os.path.join(output, 'attention.json'), as_json(result))
    print(f'{result["source"]} -> {result["target"]}\n{len(paths)} files in '
          f'{os.path.dirname(paths[0])}')

  cli.run(main)
