"""The Transformer (§3) as pure Flax modules, its loss (§5.4) and costs, and its placement on a
device mesh. Imports only `data` (the padding id) and `config` (the choices of its fields)."""
