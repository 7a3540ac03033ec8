"""Config files and fields: loading (`loading`), overriding and flattening (`fields`).

The bottom layer: it imports nothing else of the package. Checking a config's values is
`training.config_check`'s.
"""
