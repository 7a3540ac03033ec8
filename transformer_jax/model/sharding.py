"""The sharding story in one place: the device mesh's axes, the logical axes that parameters and
activations name, the rules that map the one onto the other, and where the mesh is built.

The mesh has three axes (`choices.MESH_AXES`):

  data     splits the batch's sequences (data parallelism)
  fsdp     splits the batch's sequences too, and shards parameters and Adam's moments along
           'embed' (FSDP, ZeRO-3: a layer's parameters are gathered where it computes)
  tensor   splits attention heads, d_ff and the vocabulary (tensor parallelism)

Parameters and key activations name their dimensions with logical axes (`choices.LOGICAL_AXES`,
in `attention.py`, `layers.py`, `embeddings.py` and `transformer.split_sequences`): 'batch' (a
batch's sequences), 'vocab', 'embed' (d_model), 'heads', 'kv' (d_k, d_v), 'mlp' (d_ff) and
'position'. The rules map each to mesh axes: by default 'batch' to (data, fsdp), 'embed' to
fsdp, 'heads', 'mlp' and 'vocab' to tensor, 'kv' and 'position' to none (kept whole). One set
of rules thus gives data parallelism, FSDP or tensor parallelism depending only on the mesh's
shape: an axis of size 1 leaves its dimensions whole.

What a user chooses is `config.parallel` (configs/base.py): the axes' sizes `data`, `fsdp` and
`tensor` (one may be -1, the devices left; by default every device on `data`, data parallelism as
the paper trained on 8 GPUs, §5.2) and the rules, `axis_rules`. `config/checks.py` holds them to the
names above where a config enters, before anything is built; the names live in `config/choices.py`,
the layer every other imports, for that check. The `tensor` axis was once named `model`: that name
is refused naming the new one, and a workdir saved with it resumes under the new one
(`fields.RENAMED`, `choices.RENAMED_MESH_AXES`).

The mesh is built by `make_mesh(config, devices)`: over every device for a run
(`sharded_model.ShardedModel`, the Transformer applied on the mesh, builds it unless given one),
over a sweep slot's devices for a group trained as one program (`loop.runs_together`). The
shardings follow from the mesh and the rules: the state's (`state_shardings`, `placed_shapes`)
and a batch's, its sequences split over the axes of 'batch' (`batch_sharding`, `global_batch`,
`whole_batch`).
"""

import math
from typing import Any

import flax.linen as nn
import jax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import ml_collections
import numpy as np

from transformer_jax.config.choices import MESH_AXES, mesh_axis_names


def mesh_shape(config: ml_collections.ConfigDict, num_devices: int) -> tuple[int, int, int]:
  """(data, fsdp, tensor) with a -1 resolved; a clear error if it does not use every device."""
  sizes = [config.parallel[axis] for axis in MESH_AXES]
  known = math.prod(size for size in sizes if size != -1)
  if -1 in sizes:
    if num_devices % known:
      raise ValueError(f'config.parallel {dict(zip(MESH_AXES, sizes))}: {num_devices} devices '
                       f'cannot be split into groups of {known}')
    sizes[sizes.index(-1)] = num_devices // known
  if math.prod(sizes) != num_devices:
    raise ValueError(f'config.parallel mesh {dict(zip(MESH_AXES, sizes))} needs '
                     f'{math.prod(sizes)} devices, but {num_devices} are present')
  return tuple(sizes)


def make_mesh(config: ml_collections.ConfigDict, devices=None) -> Mesh:
  """The mesh of `config.parallel`'s sizes over `devices` (default: every device)."""
  devices = jax.devices() if devices is None else devices
  shape = mesh_shape(config, len(devices))
  # Auto axes: XLA propagates shardings from the parameters' and the batch's.
  return jax.make_mesh(shape, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3,
                       devices=devices)


def axis_rules(config: ml_collections.ConfigDict) -> tuple:
  """(logical axis, mesh axes) pairs; mesh axes read back from JSON as a list become a tuple."""
  return tuple((logical, tuple(mesh_axes) if isinstance(mesh_axes, list) else mesh_axes)
               for logical, mesh_axes in config.parallel.axis_rules)


def _ways(mesh: Mesh, axes) -> int:
  """How many ways a dimension is split over `axes` (None, one mesh axis name, or a tuple)."""
  return math.prod(mesh.shape[name] for name in mesh_axis_names(axes))


def batch_shards(mesh: Mesh, rules) -> int:
  """How many ways the batch's sequences are split: the product of the mesh axes of 'batch'."""
  return _ways(mesh, nn.logical_to_mesh_axes(('batch',), rules)[0])


def batch_sharding(mesh: Mesh, rules) -> NamedSharding:
  """Sequences over the batch axes, the length dimension whole."""
  return nn.logical_to_mesh_sharding(PartitionSpec('batch', None), mesh, rules)


def stacked(sharding: NamedSharding) -> NamedSharding:
  """`sharding` with a leading axis, unsplit: of the batches of several steps stacked, or of
  several runs' states (each device holds every entry's share, as it holds the one's)."""
  return NamedSharding(sharding.mesh, PartitionSpec(None, *sharding.spec))


def state_shardings(abstract_state: Any, mesh: Mesh, rules) -> Any:
  """Shardings of a (boxed, abstract) state pytree from its logical axis names; leaves without
  names (step counts, keys) are replicated. Checks that every sharded dimension divides evenly
  and names the parameter that does not."""
  specs = nn.get_partition_spec(abstract_state)
  shardings = nn.logical_to_mesh_sharding(specs, mesh, rules)
  shapes = nn.meta.unbox(abstract_state)
  for (path, shape), sharding in zip(jax.tree_util.tree_leaves_with_path(shapes),
                                     jax.tree_util.tree_leaves(shardings)):
    for dim, axes in zip(shape.shape, sharding.spec):
      if dim % _ways(mesh, axes):
        raise ValueError(
            f'{jax.tree_util.keystr(path)} has shape {shape.shape}: dimension {dim} cannot be '
            f'split {_ways(mesh, axes)} ways over mesh axes {axes}; change config.parallel or '
            'the model size')
  return shardings


def placed_shapes(abstract_state: Any, shardings: Any) -> Any:
  """A boxed abstract state with its shardings -> unboxed `ShapeDtypeStruct`s carrying them,
  the targets orbax restores arrays into."""
  return jax.tree.map(
      lambda shape, sharding: jax.ShapeDtypeStruct(shape.shape, shape.dtype, sharding=sharding),
      nn.meta.unbox(abstract_state), shardings)


def global_batch(local_batch: dict[str, np.ndarray], sharding: NamedSharding,
                 sequence_axis: int = 0) -> dict:
  """This process's sequences (along `sequence_axis`: 1 for batches stacked along a leading
  axis) -> global arrays sharded over the batch axes. With one process the local sequences are
  the whole batch; with several, each process's sequences go to the global ones its devices
  hold, so their order follows the mesh's device order (see `whole_batch`)."""
  processes = jax.process_count()

  def global_shape(shape):
    return shape[:sequence_axis] + (shape[sequence_axis] * processes,) + shape[sequence_axis + 1:]

  return {name: jax.make_array_from_process_local_data(sharding, value, global_shape(value.shape))
          for name, value in local_batch.items()}


def whole_batch(batch: dict[str, np.ndarray], sharding: NamedSharding) -> dict:
  """A batch that every process holds whole -> global arrays sharded over the batch axes.
  Each device takes the sequences its shard covers, wherever the mesh puts this process's
  devices (`global_batch` places a process's sequences wherever its devices hold, which keeps a
  batch's content but not its order, so it is for training and loss sums only)."""
  return {name: jax.make_array_from_callback(value.shape, sharding,
                                             lambda index, value=value: value[index])
          for name, value in batch.items()}


def gather_sequences(array: jax.Array) -> np.ndarray:
  """A global batch-sharded array's sequences from every process, on the host."""
  if jax.process_count() == 1:
    return np.asarray(array)
  return np.asarray(multihost_utils.process_allgather(array, tiled=True))
