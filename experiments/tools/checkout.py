"""The checkout the experiments run from: its root holds `configs/`, `experiments/` and the
package, and the commands they start run there.

  checkout = loading.import_sibling(__file__, '../tools/checkout')
  config = loading.from_file(os.path.join(checkout.ROOT, 'configs/tiny.py'))
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
