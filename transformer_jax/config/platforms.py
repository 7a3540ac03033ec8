"""The platform's defaults: every config field that says 'auto' resolved for the platform a run
computes on ('cpu', 'gpu' or 'tpu'), before anything is built.

  config = platforms.resolved(config)            # this process's platform (JAX's backend)
  config = platforms.resolved(config, 'gpu')     # what a run would use there (`summary`)

A value the user gives wins: only 'auto' is replaced. The training loop resolves its config
where a run starts and writes the result into `config.json` (`loop.runs`), so a workdir records
what its run computed with, and a run resumed on another platform keeps it. On a CPU the
defaults are the values the configs held before they said 'auto': nothing a CPU computes
changes.

What 'auto' gives (`DEFAULTS`; each figure it rests on is in docs/performance.md):
- `dtype`: bfloat16 on GPUs and TPUs, as MaxText, t5x and big_vision compute there by default
  (parameters, optimizer state, softmax, layer norm and the loss stay float32); float32 on a
  CPU. A platform setting, not a change to the recipe: the paper's P100s had no bfloat16, and
  16-bit training reached the paper's BLEU (Ott et al., 2018). `--config.dtype=float32` is the
  paper's arithmetic anywhere.
- `train.dropout_prng_impl`: XLA's 'rbg' generator on GPUs and TPUs (faster masks, which
  depend on the mesh); JAX's 'threefry2x32' on a CPU.
- `train.loss_chunk`: 16 target positions a chunk on GPUs and TPUs (measured at base's shapes
  in bfloat16) where every batch length is a multiple of 16, else 8, as on a CPU: no position
  is padded.
- `train.bleu_every_steps`: BLEU at every dev evaluation on a CPU (`train.eval_every_steps`);
  on GPUs and TPUs at every `BLEU_EVALUATIONS`th (base: every 20000 steps) and at the last,
  where base's 1000 steps on 8 devices take seconds and beam search at each evaluation would be
  a large share of the run; the dev loss and perplexity stay at every evaluation
  (docs/training.md#evaluation-during-training).
- `train.steps_per_call`: 1 on a CPU; on GPUs and TPUs `STEPS_PER_CALL` (20), or the largest
  number below it that divides the checkpoint and evaluation intervals: the host launches one
  call of many steps, so that it keeps up with short steps. Used where training batches have
  one shape (packed, the default there: `data.pack_length`).
- `train.keep_checkpoints`: `decode.average_last`, the checkpoints §6.1 averages, on any
  platform.

Fields that were platform-dependent before 'auto' (`data.buckets`, `data.pack_length`) are
resolved where the batches are planned (`data.pipeline`), by the same platform.
"""

import math

import ml_collections

from transformer_jax.config import checks
from transformer_jax.config.choices import AUTO, AUTO_FIELDS

PLATFORMS = ('cpu', 'gpu', 'tpu')
STEPS_PER_CALL = 20  # on accelerators: the most steps a compiled call runs when 'auto'
BLEU_EVALUATIONS = 20  # on accelerators: BLEU at every 20th dev evaluation when 'auto'

# field -> (value on a CPU, value on GPUs and TPUs).
DEFAULTS = {
    'dtype': ('float32', 'bfloat16'),
    'train.dropout_prng_impl': ('threefry2x32', 'rbg'),
    'train.loss_chunk': (8, 16),
}


def current() -> str:
  """JAX's platform in this process: 'cpu', 'gpu' or 'tpu'. Initialises JAX's backends, so a
  job of several processes calls it after `jax.distributed.initialize`."""
  import jax  # pylint: disable=import-outside-toplevel  (this layer imports no JAX otherwise)
  return jax.default_backend()


def _get(config: ml_collections.ConfigDict, field: str):
  section, _, name = field.rpartition('.')
  return (config[section] if section else config)[name]


def _set(config: ml_collections.ConfigDict, field: str, value) -> None:
  section, _, name = field.rpartition('.')
  (config[section] if section else config)[name] = value


def auto_fields(config: ml_collections.ConfigDict) -> list[str]:
  """The fields of `config` that say 'auto'."""
  return [field for field in AUTO_FIELDS if _get(config, field) == AUTO]


def resolved(config: ml_collections.ConfigDict, platform: str | None = None
             ) -> ml_collections.ConfigDict:
  """A copy of a valid `config` with every 'auto' resolved for `platform` (None: this
  process's, `current`), its intervals checked against the steps a call
  (`checks.check_intervals`) and the whole against the platform (`check_platform`). `config`
  itself is returned when nothing says 'auto'."""
  platform = platform or current()
  if platform not in PLATFORMS:
    raise ValueError(f'unknown platform {platform!r}: one of {PLATFORMS}')
  autos = auto_fields(config)
  if autos:
    # A copy whose fields take a value of another type than 'auto' (a string).
    config = ml_collections.ConfigDict(config.to_dict(), type_safe=False)
    config.lock()
    accelerator = platform != 'cpu'
    for field, values in DEFAULTS.items():
      if field in autos:
        _set(config, field, values[accelerator])
    train = config.train
    if 'train.loss_chunk' in autos and not _lengths_of_sixteen(config.data):
      train.loss_chunk = DEFAULTS['train.loss_chunk'][0]
    if 'train.keep_checkpoints' in autos:
      train.keep_checkpoints = config.decode.average_last
    if 'train.bleu_every_steps' in autos:
      train.bleu_every_steps = train.eval_every_steps * (BLEU_EVALUATIONS if accelerator else 1)
    if 'train.steps_per_call' in autos:
      train.steps_per_call = steps_per_call(train.checkpoint_every_steps,
                                            train.eval_every_steps, accelerator)
    checks.check_intervals(config)  # the one check that depends on resolved fields
  check_platform(config, platform)
  return config


def _lengths_of_sixteen(data: ml_collections.ConfigDict) -> bool:
  """Whether every batch length is a multiple of 16 on an accelerator, so that a loss chunk of
  16 pads none: its coarse buckets (max_length / 4, / 2 and max_length, `data.batching`) when
  max_length is a multiple of 64, and the packed sequences' length."""
  return (data.buckets != 'fine' and data.max_length % 64 == 0
          and (data.pack_length or data.max_length) % 16 == 0)


def dtype(config: ml_collections.ConfigDict, platform: str | None = None) -> str:
  """`config.dtype`, 'auto' resolved for `platform` (None: this process's)."""
  if config.dtype != AUTO:
    return config.dtype
  return DEFAULTS['dtype'][(platform or current()) != 'cpu']


def steps_per_call(checkpoint_every_steps: int, eval_every_steps: int, accelerator: bool) -> int:
  """'auto' steps a call: 1 on a CPU; on accelerators the largest number up to STEPS_PER_CALL
  that divides both intervals (checkpoints and evaluations fall between calls)."""
  if not accelerator:
    return 1
  common = math.gcd(checkpoint_every_steps, eval_every_steps)
  return max(k for k in range(1, STEPS_PER_CALL + 1) if common % k == 0)


def _runs_cudnn(config: ml_collections.ConfigDict, platform: str) -> bool:
  return platform == 'gpu' and config.dtype == 'bfloat16'


def for_reading(config: ml_collections.ConfigDict, platform: str | None = None
                ) -> ml_collections.ConfigDict:
  """A trained run's resolved `config` as a reader of its checkpoints computes it on
  `platform` (None: this process's): cuDNN's attention, where it cannot run, becomes XLA's,
  the same eq. (1) (training refuses it there: `check_platform`)."""
  if config.model.attention_impl != 'cudnn' or _runs_cudnn(config, platform or current()):
    return config
  config = config.copy_and_resolve_references()
  config.model.attention_impl = 'xla'
  return config


def check_platform(config: ml_collections.ConfigDict, platform: str) -> None:
  """Raises ValueError naming the field when a resolved `config` cannot run on `platform`:
  cuDNN's fused attention needs an NVIDIA GPU and bfloat16 (refused here, in seconds, rather
  than inside the first compilation)."""
  if config.model.attention_impl == 'cudnn' and not _runs_cudnn(config, platform):
    raise ValueError(
        "config.model.attention_impl='cudnn' (cuDNN's fused attention) runs on NVIDIA GPUs in "
        f"bfloat16; this run computes on {platform} in {config.dtype}: set "
        "config.model.attention_impl='xla' or 'explicit'"
        + ('' if platform != 'gpu' else ", or config.dtype='bfloat16'"))
