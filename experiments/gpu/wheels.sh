#!/usr/bin/env bash
# The Python packages this project needs that a lent GPU machine's image lacks, as wheels for
# its Python 3.12, into .whl (ignored by git; carried by the device call):
#
#   bash experiments/gpu/wheels.sh
#
# Then each call, with carry [".whl", ".devdata"], starts with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit;
# The versions are those of the environment that runs it (pip show); promise has no wheel,
# so one is built from its source.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
grep -qxF '/.devdata/' .git/info/exclude || echo '/.devdata/' >> .git/info/exclude
packages=(ml_collections tensorflow-datasets array_record grain portpicker sacremoses tensorboardX
          dm-tree docstring_parser immutabledict simple-parsing tensorflow-metadata termcolor toml
          googleapis-common-protos importlib_resources wcwidth)
pinned=()
for p in "${packages[@]}"; do
  pinned+=("$p==$(python3 -m pip show "$p" | sed -n 's/^Version: //p')")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl "${pinned[@]}"
python3 -m pip wheel -q --no-deps -w .whl "promise==$(python3 -m pip show promise | sed -n 's/^Version: //p')"
ls .whl
