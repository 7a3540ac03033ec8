"""What is written to disk: files that survive crashes (`atomic`), the workdir's lock and checks
(`workdirs`), and where a result came from (`provenance`).

A bottom layer, as `config` is: it imports nothing else of the package.
"""
