r"""The paper's base model and training recipe (Vaswani et al., 2017; Table 3 row "base").

  python -m transformer_jax.summary --config=configs/base.py

Every field below cites where its value comes from. Where the paper is silent the value
follows tensor2tensor (the authors' code), and the comment says so.
"""

import ml_collections


def auto() -> ml_collections.FieldReference:
  """'auto' in a field that also takes an integer (`--config.train.steps_per_call=8`)."""
  return ml_collections.FieldReference('auto', field_type=object)


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()

  # Seed for parameter initialisation, dropout and data shuffling.
  config.seed = 0
  # Compute dtype: 'float32' (the paper, on P100 GPUs) or 'bfloat16'; 'auto' is bfloat16 on
  # GPUs and TPUs, float32 on a CPU (transformer_jax/config/platforms.py: a platform setting, not
  # a change to the recipe; 16-bit training reached the paper's BLEU, Ott et al., 2018).
  # Parameters, optimizer state, softmax, layer norm and the loss are always float32. On GPUs
  # with TF32 (A100 and later) JAX multiplies float32 matrices in TF32 by default;
  # JAX_DEFAULT_MATMUL_PRECISION=highest in the environment gives the P100's full float32
  # products. A field that says 'auto' is resolved where a run starts and recorded in its
  # config.json; `python -m transformer_jax.summary --config=... --platform=gpu` shows how.
  config.dtype = 'auto'

  config.model = ml_collections.ConfigDict()
  # N, the number of identical layers in the encoder and in the decoder (§3.1).
  config.model.num_layers = 6
  # d_model, the width of every sub-layer and embedding output (§3.1).
  config.model.d_model = 512
  # d_ff, the inner size of the position-wise feed-forward network (§3.3).
  config.model.d_ff = 2048
  # h, the number of attention heads (§3.2.2).
  config.model.num_heads = 8
  # d_k = d_v = d_model / h for the base model (§3.2.2); Table 3 varies them independently.
  config.model.d_k = 64
  config.model.d_v = 64
  # P_drop: residual dropout on every sub-layer output and on the embedding sums (§5.4).
  config.model.dropout_rate = 0.1
  # Dropout on attention weights and inside the FFN: not in the paper, nor in the
  # tensor2tensor version it was trained with (later tensor2tensor versions use 0.1).
  config.model.attention_dropout_rate = 0.0
  config.model.relu_dropout_rate = 0.0
  # 'sinusoid' (§3.5) or 'learned' (Table 3 row E).
  config.model.position_encoding = 'sinusoid'
  # Positions the model encodes: the rows of the learned table, and the longest sequence either
  # stack sees (at least data.max_length + decode.max_extra_length, the longest output).
  config.model.max_len = 512
  # Initialisation of W^Q, W^K, W^V (the paper is silent): 'fused' (tensor2tensor v1, the
  # paper's code) draws them Glorot-uniform as blocks of one fused Q/K/V projection (variance
  # 1/(2·d_model) in self-attention); 'separate' draws each on its own (d_model, h·d_k) shape
  # (variance 1/d_model), with which the post-norm model stalled on Multi30k
  # (experiments/postnorm/README.md). attention_bias adds biases to the four attention
  # projections (the paper's equations have none; tensor2tensor v1's convolutions and fairseq do).
  config.model.qkv_init = 'fused'
  config.model.attention_bias = False
  # How eq. (1) is computed in training and evaluation (decoding with the key/value cache and
  # the attention pictures always use 'explicit'): 'explicit' writes it out (scores, mask,
  # softmax in float32, dropout on the weights); 'xla' and 'cudnn' call
  # jax.nn.dot_product_attention with that implementation ('cudnn': cuDNN's fused attention, on
  # NVIDIA GPUs in bfloat16), which need d_k = d_v and no attention dropout. An option.
  config.model.attention_impl = 'explicit'
  # One matrix for source embedding, target embedding and pre-softmax projection (§3.4).
  config.model.share_embeddings = True
  # The decoder's first input, before the position encoding (§3.1 says only that the outputs
  # are shifted right): 'zero' as tensor2tensor (the embedded targets shifted right; the padding
  # id 0 embeds to zeros everywhere), or 'learned' (the padding id's row of the matrix).
  config.model.decoder_start = 'zero'
  # 'post': LayerNorm(x + Dropout(Sublayer(x))) as in §3.1; 'pre' normalises the sub-layer
  # input and adds a final norm to each stack ("Transformers without Tears"; option).
  config.model.norm_position = 'post'
  # 'layer_norm' (§3.1) or 'scale_norm'; fixnorm scales embedding rows to unit length
  # (both from "Transformers without Tears"; options).
  config.model.norm_type = 'layer_norm'
  config.model.fixnorm = False
  # Structured dropout, options from later work (default off): LayerDrop skips whole layers,
  # DropHead whole attention heads, with these probabilities during training.
  config.model.layerdrop_rate = 0.0
  config.model.drophead_rate = 0.0

  config.data = ml_collections.ConfigDict()
  # WMT 2014 English-German (§5.1): TFDS 'wmt14_translate/de-en' (train; validation =
  # newstest2013, the dev set of Table 3; test = newstest2014). Other choices: 'multi30k'
  # (Multi30k task 1), 'builtin' (a corpus the package generates, no download) and 'files'
  # (your own parallel text files, below).
  config.data.dataset = 'wmt14_translate/de-en'
  # Translation direction; swap the two for DE->EN.
  config.data.source_lang = 'en'
  config.data.target_lang = 'de'
  # Where TFDS keeps prepared datasets (None: TFDS's default, ~/tensorflow_datasets).
  config.data.tfds_data_dir = ml_collections.config_dict.placeholder(str)
  # Text preprocessing before the vocabulary (§5.1 is silent): 'none' (raw text, as
  # tensor2tensor) or 'lowercase_moses' (lowercase + Moses tokenization, the published Multi30k
  # baseline's; translations are detokenized, and stay lowercase).
  config.data.preprocessing = 'none'
  # A directory holding raw files to prepare a dataset from instead of downloading them
  # (Multi30k: train.en.gz, val.de.gz, test_2016_flickr.fr.gz, ...).
  config.data.manual_dir = ml_collections.config_dict.placeholder(str)
  # dataset='files': parallel text files, one sentence a line, plain or gzipped ('.gz'), as
  # patterns where '{lang}' stands for the language: e.g. 'corpus/train.{lang}.gz' names
  # corpus/train.en.gz and corpus/train.de.gz. test_files is optional (docs/data.md).
  config.data.train_files = ml_collections.config_dict.placeholder(str)
  config.data.validation_files = ml_collections.config_dict.placeholder(str)
  config.data.test_files = ml_collections.config_dict.placeholder(str)
  # Shared source-target byte-pair vocabulary of about 37000 tokens (§5.1), learned with
  # SentencePiece ('bpe' or 'unigram') jointly on source and target training text, from at
  # most max_corpus_chars characters (a seeded sample). spm_model: a SentencePiece model file
  # to use instead of training one.
  config.data.vocab_size = 37000
  config.data.spm_model_type = 'bpe'
  config.data.max_corpus_chars = 100_000_000
  config.data.spm_model = ml_collections.config_dict.placeholder(str)
  # A place (a directory every host mounts, or gs://bucket/path) where this config's vocabulary
  # and encoded splits were prepared once (python -m transformer_jax.data --prepare
  # --output=PLACE): every process of the run reads them from there, none prepares or waits for
  # another; a place prepared for other data fields is refused (docs/data.md). None: the run
  # prepares its data into its workdir.
  config.data.prepared = ml_collections.config_dict.placeholder(str)
  # Pairs with a side longer than this many tokens are dropped (paper: silent;
  # tensor2tensor's transformer_base uses 256).
  config.data.max_length = 256
  # ~25000 source and ~25000 target tokens per batch (§5.1): each batch holds at most this
  # many tokens on each side, padding included, in pairs of approximately equal length.
  config.data.tokens_per_batch = 25000
  # Bucket lengths (§5.1 is silent on them): 'fine' (multiples of 8 up to 64, then growing by
  # about 1/4: little padding, many shapes), 'coarse' (max_length / 4, / 2 and max_length:
  # three shapes), or 'auto': fine on a CPU, where a shape compiles quickly and padding
  # costs its share of the step, coarse on GPUs and TPUs, where each shape's compilation
  # costs far more (docs/training.md#compiling).
  config.data.buckets = 'auto'
  # Packing (0 = off; §5.1 batches by length only): training pairs whose sides fit in
  # pack_length tokens share rows of that length, several per row, so that less of each batch
  # is padding (transformer_jax/data/batching.py). None: off on a CPU; on GPUs and TPUs
  # max_length, so that every training batch has one shape and compiles once.
  config.data.pack_length = ml_collections.config_dict.placeholder(int)
  # Training batches are assembled and placed on the devices by a background thread, this many
  # compiled calls (train.steps_per_call batches each) ahead of the step, so the devices never
  # wait for the host (transformer_jax/training/feed.py); 0 prepares each on the training thread.
  config.data.prefetch = 4
  # The seed of the training batches' order (None: config.seed). Runs trained together as one
  # program (`transformer_jax.training.together`) see the same batches: the first run's order,
  # written into every run's workdir here so that each resumes alone as it was trained.
  config.data.shuffle_seed = ml_collections.config_dict.placeholder(int)

  config.train = ml_collections.ConfigDict()
  # 100K steps for the base model (§5.2).
  config.train.num_train_steps = 100_000
  # lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5), warmup_steps = 4000
  # (§5.3, eq. 3); lr_scale multiplies it (1 = the paper).
  config.train.warmup_steps = 4000
  config.train.lr_scale = 1.0
  # Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 (§5.3).
  config.train.adam_b1 = 0.9
  config.train.adam_b2 = 0.98
  config.train.adam_eps = 1e-9
  # ε_ls, label smoothing (§5.4).
  config.train.label_smoothing = 0.1
  # tokens_per_batch is the batch of one optimizer step on any hardware: when the devices
  # cannot hold it at once, each step accumulates gradients over this many micro-batches.
  config.train.grad_accum_steps = 1
  # 0: the loss is computed from the whole (tokens, vocab) logits. N > 0: the pre-softmax
  # projection and the loss are fused, N target positions at a time, the logits' gradient
  # formed in the same pass (loss.fused_loss_sums): the same sums and gradients, with no
  # (tokens, vocab) array whole. Evaluation's loss is then chunked the same way. 8 divides
  # every bucket length (data.batching) while data.max_length is a multiple of 8, so no
  # position is padded, and keeps rows x 8 a multiple of 8, so no chunk's logit gradient is
  # padded for the GPU's matrix products. 'auto': 8 on a CPU, 16 on GPUs and TPUs (measured
  # steps: docs/performance.md).
  config.train.loss_chunk = auto()
  # The random-number generator of dropout's masks (the paper is silent): JAX's default
  # 'threefry2x32' (its masks are the same however a batch is split over devices), or XLA's
  # 'rbg' / 'unsafe_rbg' generators, which large JAX codebases use for speed on accelerators
  # (their masks depend on the mesh). Each keeps an element with the same probability; the
  # parameters are drawn with threefry whatever this says. Fixed for a run's checkpoints.
  # 'auto': 'rbg' on GPUs and TPUs, 'threefry2x32' on a CPU.
  config.train.dropout_prng_impl = 'auto'
  # K consecutive steps run as one compiled call (a lax.scan over K stacked batches), so the
  # host dispatches once per K steps: for small models on accelerators, whose steps are shorter
  # than what the host spends launching them. The steps are those of K = 1. Logging, checkpoints,
  # evaluation and preemption happen between calls, so checkpoint_every_steps and
  # eval_every_steps must be multiples of K. Used when every training batch has one shape
  # (packed at data.max_length: the default on GPUs and TPUs); otherwise each step is a call.
  # 'auto': 1 on a CPU; on GPUs and TPUs 20, or the largest number below it that divides both
  # intervals.
  config.train.steps_per_call = auto()
  # JAX's persistent compilation cache (transformer_jax/training/compilation.py): None keeps it in
  # $XDG_CACHE_HOME/transformer_jax/jax (~/.cache/... by default), a path moves it, '' turns it
  # off. A resumed run, another seed or an evaluation then loads its programs, not compiles.
  config.train.compilation_cache_dir = ml_collections.config_dict.placeholder(str)
  # Logging, evaluation on the dev split (loss, per-token perplexity, token accuracy and BLEU
  # decoded as config.decode says; num_eval_steps = -1 evaluates the whole split) and
  # checkpoints. §6.1 averages the last 5 (base) or 20 (big) checkpoints, "written at
  # 10-minute intervals": at base's 0.4 s per step (§5.2) that is every 1500 steps (big: 600,
  # configs/big.py). Counted in steps here, so the averaged stretch is the paper's on any
  # hardware; the last step is saved too.
  config.train.log_every_steps = 100
  config.train.eval_every_steps = 1000
  config.train.num_eval_steps = -1
  config.train.eval_bleu = True
  # BLEU is decoded at the evaluations whose step is a multiple of this, and at the last: 'auto'
  # is every evaluation on a CPU, every 20th on GPUs and TPUs, where base's 1000 steps take
  # seconds and beam search at each would be a large share of the run
  # (docs/training.md#evaluation-during-training).
  config.train.bleu_every_steps = auto()
  config.train.checkpoint_every_steps = 1500
  # Checkpoints kept for §6.1's average ('auto': decode.average_last), each holding only the
  # parameters; the newest two also hold the optimizer state, to resume from
  # (transformer_jax/training/checkpointing.py).
  config.train.keep_checkpoints = auto()

  # How the run is spread over the devices: the mesh's axes, the logical axes and the rules
  # between them are explained in transformer_jax/model/sharding.py.
  config.parallel = ml_collections.ConfigDict()
  # The mesh's sizes (data, fsdp, tensor); -1 takes the remaining devices. The default is pure
  # data parallelism over every device.
  config.parallel.data = -1
  config.parallel.fsdp = 1
  config.parallel.tensor = 1
  # Logical axis -> mesh axes: the batch split over data and fsdp (data parallelism), parameters
  # and Adam's moments over fsdp along 'embed' (FSDP) and over tensor along heads, d_ff and the
  # vocabulary (tensor parallelism). A mesh axis of size 1 leaves its dimensions whole.
  config.parallel.axis_rules = (
      ('batch', ('data', 'fsdp')),
      ('vocab', 'tensor'),
      ('embed', 'fsdp'),
      ('heads', 'tensor'),
      ('kv', None),
      ('mlp', 'tensor'),
      ('position', None),
  )
  # Multi-host: call jax.distributed.initialize() first. The three values may stay None on
  # TPU pods and SLURM, where JAX detects them.
  config.parallel.distributed = False
  config.parallel.coordinator_address = ml_collections.config_dict.placeholder(str)
  config.parallel.num_processes = ml_collections.config_dict.placeholder(int)
  config.parallel.process_id = ml_collections.config_dict.placeholder(int)

  config.decode = ml_collections.ConfigDict()
  # Beam search with beam size 4 and length penalty α = 0.6 (§6.1).
  config.decode.beam_size = 4
  config.decode.alpha = 0.6
  # Maximum output length = input length + 50 (§6.1).
  config.decode.max_extra_length = 50
  # The base model averages its last 5 checkpoints (§6.1).
  config.decode.average_last = 5

  # Locked: a misspelt field in an override or a variant's delta is an error, not a new field.
  config.lock()
  return config
