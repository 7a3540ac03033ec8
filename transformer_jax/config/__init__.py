"""Configs: files loaded (`loading`), fields overridden and flattened (`fields`), values checked
(`checks`) against the choices each field may take (`choices`).

The bottom layer: it imports nothing else of the package; the data and model modules take their
fields' choices from it.
"""
