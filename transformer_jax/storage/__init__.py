"""Files that survive crashes: atomic writes (`atomic`) and the workdir's lock and checks
(`workdirs`). The bottom layer: it imports nothing else of the package."""
