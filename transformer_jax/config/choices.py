"""The values a config's choice fields may take, and the axis names its sharding rules map:
what `checks` holds a config to, and where the modules that read those fields take them from."""

# The values each string option of `config.model` takes (the first is the default).
MODEL = {
    'position_encoding': ('sinusoid', 'learned'),
    'norm_position': ('post', 'pre'),
    'norm_type': ('layer_norm', 'scale_norm'),
    'qkv_init': ('fused', 'separate'),
    'decoder_start': ('zero', 'learned'),
    'attention_impl': ('explicit', 'xla', 'cudnn'),
}
# A field that says 'auto' takes the platform's default where a run starts (`platforms`).
AUTO = 'auto'
AUTO_FIELDS = ('dtype', 'train.dropout_prng_impl', 'train.loss_chunk', 'train.steps_per_call',
               'train.bleu_every_steps', 'train.keep_checkpoints')
DTYPES = ('float32', 'bfloat16')
DATASETS = ('wmt14_translate/de-en', 'wmt14_translate/fr-en', 'multi30k', 'builtin', 'files')
SPM_MODEL_TYPES = ('bpe', 'unigram')
# `config.data.preprocessing` (data/preprocessing.py).
PREPROCESSING = ('none', 'lowercase_moses')
# `config.data.buckets`' bucket sets, besides 'auto' (data/batching.py).
BUCKETS = ('fine', 'coarse')
DROPOUT_PRNG_IMPLS = ('threefry2x32', 'rbg', 'unsafe_rbg')

# The device mesh's axes (sized by `config.parallel`), and the logical axes that parameters and
# activations name, which `config.parallel.axis_rules` maps onto them: model/sharding.py says
# what each means. They are here, in the layer every other imports, so that `checks` holds a
# config to them where it enters.
MESH_AXES = ('data', 'fsdp', 'tensor')
LOGICAL_AXES = ('batch', 'vocab', 'embed', 'heads', 'kv', 'mlp', 'position')
# Mesh axes renamed, with their new names: a rule naming the old one is refused naming the new.
RENAMED_MESH_AXES = {'model': 'tensor'}


def mesh_axis_names(axes) -> tuple:
  """The mesh axis names of a rule's `axes`: None, one name, or a tuple (a list from JSON)."""
  return () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
